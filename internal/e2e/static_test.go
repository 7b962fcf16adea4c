package e2e_test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// staticSession is the session timeout of the static-membership tests:
// long enough that a restart on a loaded machine comes back within it, and
// that a move after it is told apart from a move at once.
const staticSession = 30 * time.Second

// counts returns m's partition starts, partition stops and sessions so far.
func (m *member) counts() (started, stopped, sessions int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started, m.stopped, m.sessions
}

// logged reports whether m's recent log has a line containing s.
func (m *member) logged(s string) bool {
	return strings.Contains(m.logs.String(), s)
}

// TestStaticMemberRestartMovesNothing runs two static members (exactly-once,
// eager sticky, every partition stops at a rebalance) and restarts one of
// them within the session timeout twice — after a clean stop, which keeps
// its membership, and after a SIGKILL mid-stream — and then the other, the
// group's leader: the member that is not restarted never starts a new
// session nor stops or starts a partition (for the leader's restart: on a
// real broker), the restarted
// process gets its partitions back, and a read_committed reader sees every
// output of the model exactly once (the restart's producer, with the
// transactional id made of the instance id, aborted the transaction the
// killed process left open). Then the member stops with --leave-on-stop:
// its partitions move to the other at once, well before the session
// timeout.
func TestStaticMemberRestartMovesNothing(t *testing.T) {
	const partitions = 4
	f := newFleet(t, buildCLI(t), "static", partitions, "sticky", true,
		"--session-timeout", staticSession.String())
	wc := f.workload(20_000, 1000, 31)
	f.cfg.IdleTimeout = 10 * time.Minute
	recs := workload.Generate(wc)
	slice := func(i int) []workload.Record { return recs[i*len(recs)/10 : (i+1)*len(recs)/10] }
	const margin = 300

	f.produce(t, slice(0))
	a := f.start(t, "a", "--instance-id", "a")
	// a joins alone: the outputs below the margin may be none, so the wait
	// for them alone would not wait for a's first generation.
	f.waitStarted(t, a)
	f.waitCovered(t, margin, "a alone")
	b := f.start(t, "b", "--instance-id", "b")
	f.produce(t, slice(1))
	f.waitStarted(t, b)
	f.produce(t, slice(2))
	f.waitCovered(t, margin, "a, b")
	aStarted, aStopped, aSessions := a.counts()
	require.Positive(t, aStarted)

	// A clean stop keeps b's membership: its partitions wait for it.
	f.stop(t, b)
	require.False(t, b.logged(`"msg":"static member left the group"`))
	f.produce(t, slice(3))
	stopped := time.Now()
	b = f.start(t, "b", "--instance-id", "b")
	f.waitStarted(t, b)
	t.Logf("b restarted after a clean stop: its partitions started %v after the restart began", time.Since(stopped).Round(time.Millisecond))
	f.produce(t, slice(4))
	f.waitCovered(t, margin, "a, b after b's clean restart")

	// A SIGKILL mid-stream, a restart at once.
	f.produce(t, slice(5)[:len(slice(5))/2])
	f.kill(t, b)
	b = f.start(t, "b", "--instance-id", "b")
	f.waitStarted(t, b)
	f.produce(t, slice(5)[len(slice(5))/2:])
	f.waitCovered(t, margin, "a, b after b's kill and restart")

	started, stoppedParts, sessions := a.counts()
	require.Equal(t, []int{aStarted, aStopped, aSessions}, []int{started, stoppedParts, sessions},
		"a static member's restarts within the session timeout rebalance nothing: a's partition starts, stops and sessions")
	bStarted, bStopped, bSessions := b.counts()
	require.Equal(t, 1, bSessions, "the restarted b joined once, into the running generation")

	// a joined first and leads the group (a leader stays until it leaves):
	// on a real broker the leader's restart rebalances nothing either. The
	// embedded broker rebalances the group when a static leader rejoins, so
	// there the restart is only required to keep the outputs exact.
	f.stop(t, a)
	f.produce(t, slice(6)[:len(slice(6))/2])
	a = f.start(t, "a", "--instance-id", "a")
	f.waitStarted(t, a)
	f.produce(t, slice(6)[len(slice(6))/2:])
	f.waitCovered(t, margin, "a, b after a's clean restart")
	if f.b.Real() {
		started, stoppedParts, sessions = b.counts()
		require.Equal(t, []int{bStarted, bStopped, bSessions}, []int{started, stoppedParts, sessions},
			"the leader's restart within the session timeout rebalances nothing: b's partition starts, stops and sessions")
	}

	// Outputs so far: none repeated, none different from the model's.
	r := f.check(t, reference.NoDuplicates)
	o := r.Outputs()
	require.Zero(t, o.Mismatched+o.Unexpected+o.IdenticalDuplicates+o.ConflictingDuplicates+
		r.DeadLetters.Mismatched+r.DeadLetters.Unexpected+r.DeadLetters.IdenticalDuplicates+r.DeadLetters.ConflictingDuplicates, r.Summary())

	// With --leave-on-stop the stop hands b's partitions over at once.
	f.stop(t, b)
	b = f.start(t, "b", "--instance-id", "b", "--leave-on-stop")
	f.waitStarted(t, b)
	f.produce(t, slice(7))
	f.waitCovered(t, margin, "a, b with --leave-on-stop")
	before, _, _ := a.counts()
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	sent := time.Now()
	require.NoError(t, <-b.exited, b.logs.String())
	delete(f.members, b.name)
	require.True(t, b.logged(`"msg":"static member left the group"`), b.logs.String())
	f.waitStartedMore(t, a, before)
	gap := time.Since(sent)
	t.Logf("--leave-on-stop: a started b's partitions %v after b's SIGTERM", gap.Round(time.Millisecond))
	require.Less(t, gap, staticSession, "a leaving static member's partitions move before its session times out")

	f.produce(t, slice(8))
	f.produce(t, slice(9))
	f.sentinels(t)
	f.waitCovered(t, 0, "a alone after b left: everything")
	f.stop(t, a)
	f.b.WaitStable(t, f.out)
	f.b.WaitStable(t, f.dlq)
	f.verify(t)
}

// TestDuplicateInstanceIDStopsTheOlderProcess: a second process started
// with a running one's --instance-id takes its place in the group; the
// older one is fenced and exits with an error (1) that says so, instead of
// both taking the membership from each other for ever.
func TestDuplicateInstanceIDStopsTheOlderProcess(t *testing.T) {
	f := newFleet(t, buildCLI(t), "dupid", 2, "sticky", false)
	wc := f.workload(2_000, 100, 7)
	f.produce(t, workload.Generate(wc))

	older := f.start(t, "older", "--instance-id", "same")
	f.waitStarted(t, older)
	newer := f.start(t, "newer", "--instance-id", "same")
	select {
	case err := <-older.exited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, older.logs.String())
		require.Equal(t, 1, ee.ExitCode(), older.logs.String())
		require.Contains(t, older.logs.String(), "another consumer with the same group.instance.id")
	case <-time.After(2 * time.Minute):
		t.Fatalf("the fenced process still runs 2 minutes after another took its instance id\n%s", older.logs.String())
	}
	delete(f.members, older.name)
	f.waitStarted(t, newer)
	f.stop(t, newer)
}
