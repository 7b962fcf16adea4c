package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRestoreAfterStateDirDeleted: `run` stopped mid-stream, its --state-dir
// deleted, more input, a restart on the empty directory. The windows
// (clicks, installs, dedup ids) come back from the changelog, so the
// outputs equal the reference model's exactly, each once — installs
// attributed to clicks from before the deletion, duplicates across it
// recognised.
func TestRestoreAfterStateDirDeleted(t *testing.T) {
	tp := newTopics(t, 4)
	tp.produce(t, 4000, 31)

	pz := newPauser("install", 300)
	first := startCLI(t, hooks{wrapStages: pz.wrap}, tp.runArgs()...)
	recv(t, pz.blocked, "the install stage to block mid-stream")
	first.cancel()
	close(pz.release)
	require.Equal(t, exitOK, first.stop(t), tail(first.err.String()))

	require.NoError(t, os.RemoveAll(tp.stateDir))
	tp.produce(t, 4000, 32) // more input (the same event ids again: duplicates across the deletion)
	second := tp.runToEnd(t)
	require.Contains(t, second.err.String(), "rebuilding from the changelog")
	require.Contains(t, second.err.String(), `"msg":"partition state restored"`)
	tp.verifyOutputs(t)
}

// TestStaleLocalStateIsCaughtUp: member a runs, b joins and takes
// partitions, more input, b leaves cleanly and its partitions come back to
// a — whose local state for them is stale: another instance moved them on.
// a must not reuse it as it is (clicks b stored would be missing) but catch
// it up from the changelog; every output equals the model's, once.
func TestStaleLocalStateIsCaughtUp(t *testing.T) {
	tp := newTopics(t, 4)
	tp.produce(t, 3000, 51)
	_, ends := tp.input(t)
	w := newWatcher()
	a := startCLI(t, hooks{chainOptions: w.member().options()}, tp.runArgs()...)
	recv(t, w.reach(ends), "a to finish the first input")

	b := startCLIWatching(t, hooks{chainOptions: w.member().options()}, `"msg":"partition started"`,
		tp.runArgs("--state-dir", t.TempDir())...)
	recv(t, b.logged, "b to start a partition")
	tp.produce(t, 3000, 52)
	_, ends = tp.input(t)
	recv(t, w.reach(ends), "a and b to finish the second input")
	require.Equal(t, exitOK, b.stop(t), tail(b.err.String()))

	tp.produce(t, 3000, 53)
	_, ends = tp.input(t)
	recv(t, w.reach(ends), "a to finish the third input")
	require.Equal(t, exitOK, a.stop(t), tail(a.err.String()))
	require.Contains(t, a.err.String(), "local state is a prefix of the committed one: catching up",
		"a's state of b's partitions was stale")
	tp.verifyOutputs(t)
}
