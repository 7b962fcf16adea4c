package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/kafka"
)

// TestProduceRunStopRestart is the in-process end-to-end test: `produce`,
// then `run` stopped mid-stream (its context ends, as on SIGTERM) while the
// install stage is blocked on a record, more input, a restart that runs to
// the end, and the outputs and dead letters must equal the reference
// model's exactly: a clean stop and restart lose nothing and repeat nothing
// (DESIGN I6), and window state persisted by the first run (clicks) is used
// by the second (installs attributed across the restart).
func TestProduceRunStopRestart(t *testing.T) {
	tp := newTopics(t, 4)
	tp.produce(t, 4000, 7)

	pz := newPauser("install", 300)
	first := startCLI(t, hooks{wrapStages: pz.wrap}, tp.runArgs()...)
	part := recv(t, pz.blocked, "the install stage to block mid-stream")
	t.Logf("install stage blocked on partition %d; stopping", part)
	first.cancel()
	close(pz.release) // the record in flight completes during the drain
	require.Equal(t, exitOK, first.stop(t), tail(first.err.String()))
	require.Contains(t, first.err.String(), "differential run stopped cleanly")

	tp.produce(t, 4000, 8) // more input (the same event ids: duplicates across the restart)
	second := tp.runToEnd(t)
	r := tp.verifyOutputs(t)
	// The restart logs where each stage resumes, watermarks as RFC 3339 times.
	started := regexp.MustCompile(`"msg":"partition started".*"resume":\{"click":\{"next":\d+,"watermark":"2026-\d\d-\d\dT[0-9:.]+Z"\}`)
	require.Regexp(t, started, second.err.String())
	require.NotRegexp(t, `"watermark":\d{16,}`, second.err.String())
	t.Logf("%d installs, %d purchases, %d dead letters, %d duplicates skipped", r.Installs.Matched, r.Purchases.Matched, r.DeadLetters.Matched, r.Skipped)
}

// TestSIGTERMToBinary sends a real SIGTERM to the built binary while it
// works through the input: it must exit 0 after the final commit; a restart
// (in-process) then finishes the input, and the outputs equal the reference
// model's with no duplicate.
func TestSIGTERMToBinary(t *testing.T) {
	bin := binary(t)
	tp := newTopics(t, 4)
	tp.produce(t, 30_000, 11)

	cmd := exec.Command(bin, tp.runArgs()...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	began := time.Now()
	exited := make(chan error, 1)
	lines := make(chan map[string]any, 1024)
	var all strings.Builder
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		// A line longer than the scanner's buffer would end the loop and
		// leave the pipe undrained: the binary would block on a write and
		// never exit.
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case lines <- m:
				default: // the test stopped reading: keep draining the pipe
				}
			}
		}
	}()
	// Mid-stream: every partition has started (a partition still looking
	// for its first record when the signal comes has nothing to commit and
	// logs no "partition stopped"; CI once sent the signal before the
	// fourth had started) and a few records have been dead-lettered (about
	// 1% of the input is malformed, spread over the log).
	started := map[float64]bool{}
	for seen := 0; seen < 20 || len(started) < 4; {
		m, ok := <-lines
		require.True(t, ok, "the binary exited early")
		switch m["msg"] {
		case "record dead-lettered":
			seen++
		case "partition started":
			p, _ := m["partition"].(float64)
			started[p] = true
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Since(began)
	go func() {
		for range lines {
		}
		exited <- cmd.Wait()
	}()
	// The binary drains what it began and makes the final commits; under
	// load that is bounded by its shutdown timeout (30 s) plus leaving the
	// group, so the bound here is a hang detector, well above it.
	select {
	case err := <-exited:
		require.NoError(t, err, "exit status after SIGTERM; stderr:\n%s", all.String())
	case <-time.After(3 * waitTimeout):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the binary did not exit within %v of SIGTERM; stderr:\n%s", 3*waitTimeout, tail(all.String()))
	}
	out := all.String()
	require.Contains(t, out, "differential run stopped cleanly")
	var committed float64
	stopped := map[float64]int{}
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "partition stopped" {
			p, _ := m["partition"].(float64)
			stopped[p]++
			c, _ := m["committed"].(float64)
			committed += max(c, 0)
		}
	}
	require.Equal(t, map[float64]int{0: 1, 1: 1, 2: 1, 3: 1}, stopped,
		"every partition made its final commit, once; stderr:\n%s", tail(out))
	t.Logf("SIGTERM %v after the start; the final commits covered %.0f of 30,000 records", signalled.Round(time.Millisecond), committed)

	tp.runToEnd(t)
	tp.verifyOutputs(t)
}

// TestRunReportsMissingTopics: a missing output topic fails at once with a
// message naming the topic and its flag (exit 1, not a usage error).
func TestRunReportsMissingTopics(t *testing.T) {
	tp := newTopics(t, 1)
	args := tp.runArgs()
	for i, a := range args {
		if a == "--output" {
			args[i+1] = "no-such-topic-" + tp.group
		}
	}
	code, _, errs := runCLI(t, hooks{}, args...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, `topic "no-such-topic-`+tp.group+`" (--output) does not exist`)
	require.Contains(t, errs, "differential does not create topics")
}

// TestDebugLogIncludesSarama: at --log-level debug the run's log carries
// sarama's client log (the first thing to read when a partition stops
// moving), tagged "component":"sarama"; at info it does not.
func TestDebugLogIncludesSarama(t *testing.T) {
	tp := newTopics(t, 1)
	args := tp.runArgs()
	for i, a := range args {
		if a == "--output" {
			args[i+1] = "no-such-topic-" + tp.group // exits right after connecting
		}
	}
	_, _, errs := runCLI(t, hooks{}, append(args, "--log-level", "debug")...)
	require.Contains(t, errs, `"component":"sarama"`)
	require.Contains(t, errs, "Initializing new client")
	_, _, errs = runCLI(t, hooks{}, append(args, "--log-level", "info")...)
	require.NotContains(t, errs, `"component":"sarama"`)
}

// TestBinaryExitsTwoOnBadFlags checks the real process's exit status.
func TestBinaryExitsTwoOnBadFlags(t *testing.T) {
	cmd := exec.Command(binary(t), "run", "--brokers", "localhost:9092", "--start", "sideways")
	_, err := cmd.Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.ExitCode())
	require.Contains(t, string(ee.Stderr), `invalid value "sideways" for flag --start: must be one of earliest, latest`)
}

// TestStateDirInUse: a second process given the --state-dir a running
// `run` holds fails with exit 1 saying the directory is in use by another
// differential process (Pebble's lock), not "resource temporarily
// unavailable"; a second run in the same process says the same.
func TestStateDirInUse(t *testing.T) {
	bin := binary(t)
	tp := newTopics(t, 1)
	first := startCLIWatching(t, hooks{}, "differential run starting", tp.runArgs()...)
	recv(t, first.logged, "the first run to open its state")

	want := "--state-dir " + tp.stateDir + " is in use by another differential process"
	cmd := exec.Command(bin, tp.runArgs("--group", tp.group+"-2")...)
	_, err := cmd.Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitFatal, ee.ExitCode(), string(ee.Stderr))
	require.Contains(t, string(ee.Stderr), want)
	require.NotContains(t, string(ee.Stderr), "resource temporarily unavailable")

	code, _, errs := runCLI(t, hooks{}, tp.runArgs("--group", tp.group+"-3")...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, want)
	require.Equal(t, exitOK, first.stop(t), tail(first.err.String()))
}

// TestRunChangelogTopic: run creates the changelog topic when it is missing
// (the input's partition count, compacted) and refuses one that cannot hold
// the state, with exit 1 and a message saying why. (A compacted one with
// fewer partitions is grown: TestPartitionsAddedWhileRunningAreConsumed.)
func TestRunChangelogTopic(t *testing.T) {
	tp := newTopics(t, 4)
	tp.produce(t, 200, 3)

	sixParts := tp.b.Topic(t, 6)
	code, _, errs := runCLI(t, hooks{}, tp.runArgs("--changelog-topic", sixParts)...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, "has 6 partitions, the input topic")

	deleting := tp.b.Topic(t, 4) // cleanup.policy=delete
	code, _, errs = runCLI(t, hooks{}, tp.runArgs("--changelog-topic", deleting)...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, `cleanup.policy="delete", want compact`)

	code, _, errs = runCLI(t, hooks{}, tp.runArgs("--changelog-topic", "bad name")...)
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "--changelog-topic")

	// Missing: created, and the run goes on to the end.
	tp.runToEnd(t)
	tp.verifyOutputs(t)
	admin, err := sarama.NewClusterAdmin(tp.b.Addrs(), tp.b.Config())
	require.NoError(t, err)
	defer admin.Close()
	name := kafka.ChangelogTopic(tp.group, tp.in)
	md, err := admin.DescribeTopics([]string{name})
	require.NoError(t, err)
	require.Len(t, md[0].Partitions, 4)
}
