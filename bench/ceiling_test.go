package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
)

// childEnv makes the test binary a ceiling child (TestMain): "ceiling"
// serves one pass (what the CLI's bench-ceiling does); "hang" announces
// itself on stderr and never ends (a pass that overruns).
const childEnv = "DIFFERENTIAL_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "ceiling":
		if err := ServeCeiling(context.Background(), os.Stdin, os.Stdout, os.Stderr, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "harness":
		harnessChild()
	case "hang":
		fmt.Fprintf(os.Stderr, "hanging child %d started\n", os.Getpid())
		time.Sleep(time.Hour) // the child under test: it must be killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// harnessChild is TestMain's "harness" mode: a harness process that runs
// one ceiling pass in a child that never ends ("hang"), for
// TestCeilingChildDiesWithHarness to kill.
func harnessChild() {
	_ = os.Setenv(childEnv, "hang")
	c, err := openBroker([]string{"127.0.0.1:1"})
	if err != nil {
		panic(err)
	}
	o := Options{Timeout: time.Hour, CeilingCommand: []string{os.Args[0]}, Progress: os.Stderr}.withDefaults()
	h := &harness{o: o, c: c, cfg: attributionConfig()}
	_, err = h.measureChild(context.Background(), runSpec{kind: kindRaw, pt: workloadB(), topic: "t", ends: []int64{1}})
	panic(err) // not reached: the test kills this process
}

// ceilingHarness is a harness on the test broker (DIFFERENTIAL_TEST_BROKERS,
// else an embedded one) whose ceilings run in children of this test binary.
func ceilingHarness(t *testing.T, o Options) *harness {
	t.Helper()
	var brokers []string
	if env := os.Getenv(testbroker.EnvBrokers); env != "" {
		brokers = strings.Split(env, ",")
	}
	c, err := openBroker(brokers)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	o.CeilingCommand = []string{os.Args[0]}
	return &harness{o: o.withDefaults(), c: c, cfg: attributionConfig()}
}

// TestCeilingsInChildProcesses: with CeilingCommand, every raw and no-op
// pass runs in a child process of its own (the test binary serving
// ServeCeiling) against the parent's broker and reads the whole input;
// the pairs of the reported figure are the children's.
func TestCeilingsInChildProcesses(t *testing.T) {
	t.Setenv(childEnv, "ceiling")
	var progress testutil.SyncBuffer
	h := ceilingHarness(t, Options{Quick: true, Records: 3_000, Progress: &progress})
	pt := workloadB()
	pr := h.newPointRun(pt)
	t.Cleanup(pr.close)
	wr := &WorkloadResult{Workload: "B"}
	require.NoError(t, h.ceilings(context.Background(), pr, wr), progress.String())

	require.Equal(t, CeilingChildProcess, wr.CeilingMethod)
	require.Equal(t, 3_000, wr.CeilingRecords)
	require.Len(t, wr.NoopRawPairs, ceilingPairs)
	wr.ratios()
	require.Len(t, wr.NoopRawBalanced, ceilingPairs/2)
	require.Equal(t, medianOf(wr.NoopRawBalanced), wr.RatioNoopRaw)
	for _, r := range []*DesignResult{wr.Raw, wr.NoopChain} {
		require.NotNil(t, r)
		require.True(t, r.OwnProcess, r.Design)
		require.Equal(t, 3_000, r.Records, r.Design)
		require.Positive(t, r.ThroughputRPS, r.Design)
		require.Positive(t, r.CPUs, r.Design)
	}
	require.Equal(t, string(kindRaw), wr.Raw.Design)
	require.Equal(t, string(kindNoop), wr.NoopChain.Design)
	// Ten passes in children, each its own process.
	pids := map[string]bool{}
	for _, m := range regexp.MustCompile(`bench \[child (\d+)\]:`).FindAllStringSubmatch(progress.String(), -1) {
		pids[m[1]] = true
	}
	require.Len(t, pids, 2*ceilingPairs, progress.String())
	require.NotContains(t, pids, strconv.Itoa(os.Getpid()))

	wr.ratios()
	require.NotNil(t, wr.RatioNoopRaw)
	var b strings.Builder
	(&Report{}).writeWorkload(&b, wr)
	require.Contains(t, b.String(), "raw consumer (own process: its cpu, its heap)")
	require.Contains(t, b.String(), "each pass in a fresh child process")
}

// TestCeilingSpecRefused: a spec the child cannot run fails with
// ErrCeilingSpec and a message naming what is wrong, before any pass
// starts, and writes nothing on stdout.
func TestCeilingSpecRefused(t *testing.T) {
	h := ceilingHarness(t, Options{Quick: true})
	pr := h.newPointRun(workloadB())
	t.Cleanup(pr.close)
	in, err := pr.input(500)
	require.NoError(t, err)
	good := CeilingSpec{Brokers: h.c.Addrs(), Topic: in.topic, Ends: in.ends, Kind: string(kindRaw), Group: h.c.name("group"),
		BufferSize: 64, CommitInterval: "50ms", Timeout: "1m"}
	spec := func(change func(*CeilingSpec)) string {
		s := good
		s.Ends = append([]int64(nil), good.Ends...)
		change(&s)
		body, err := json.Marshal(s)
		require.NoError(t, err)
		return string(body)
	}
	for _, c := range []struct{ name, stdin, want string }{
		{"nothing", "", "no spec on stdin"},
		{"not JSON", "raw please", "invalid character"},
		{"unknown field", `{"topik":"x"}`, `unknown field "topik"`},
		{"two values", spec(func(*CeilingSpec) {}) + spec(func(*CeilingSpec) {}), "more than one JSON value"},
		{"kind", spec(func(s *CeilingSpec) { s.Kind = "noop" }), `kind: want "raw" or "noop_chain", got "noop"`},
		{"no brokers", spec(func(s *CeilingSpec) { s.Brokers = nil }), "brokers: want one or more host:port"},
		{"no ends", spec(func(s *CeilingSpec) { s.Ends = nil }), "ends: want one end offset per partition"},
		{"negative end", spec(func(s *CeilingSpec) { s.Ends[1] = -1 }), "ends[1] is -1"},
		{"interval", spec(func(s *CeilingSpec) { s.CommitInterval = "soon" }), `commit_interval: want a duration > 0 (e.g. 200ms), got "soon"`},
		{"buffer", spec(func(s *CeilingSpec) { s.BufferSize = 1 }), "buffer_size must be >= 2, got 1"},
		{"partitions", spec(func(s *CeilingSpec) { s.Ends = s.Ends[:3] }), fmt.Sprintf("topic %s has %d partitions, the spec gives 3 end offsets", in.topic, len(in.ends))},
		{"past the end", spec(func(s *CeilingSpec) { s.Ends[2] += 5 }), fmt.Sprintf("topic %s partition 2 ends at offset %d, below the spec's end %d", in.topic, in.ends[2], in.ends[2]+5)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := ServeCeiling(context.Background(), strings.NewReader(c.stdin), &stdout, &stderr, nil)
			require.ErrorIs(t, err, ErrCeilingSpec)
			require.ErrorContains(t, err, c.want)
			require.Empty(t, stdout.String())
		})
	}
	// The good spec runs.
	var stdout, stderr bytes.Buffer
	require.NoError(t, ServeCeiling(context.Background(), strings.NewReader(spec(func(*CeilingSpec) {})), &stdout, &stderr, nil), stderr.String())
	var r DesignResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r))
	require.Equal(t, 500, r.Records)
	require.True(t, r.OwnProcess)
}

// TestCeilingChildKilled: a child that overruns Timeout, or is still
// running when the context ends, is killed — the call returns, says so,
// and the child's process is gone.
func TestCeilingChildKilled(t *testing.T) {
	t.Setenv(childEnv, "hang")
	for _, c := range []struct {
		name    string
		timeout time.Duration
		cancel  bool
		want    string
	}{
		// Timeout leaves the child time to start and say so on a loaded
		// machine: it is killed after Timeout whether it has or not.
		{"overrun", 2 * time.Second, false, "killed: still running after 2.5s (Timeout 2s)"},
		{"cancelled", 10 * time.Minute, true, "killed: context canceled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			started := &watchWriter{re: regexp.MustCompile(`hanging child (\d+) started`), found: make(chan string, 1)}
			h := ceilingHarness(t, Options{Brokers: []string{"127.0.0.1:1"}, Timeout: c.timeout, Progress: started})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := h.measureChild(ctx, runSpec{kind: kindRaw, pt: workloadB(), topic: "t", ends: []int64{1}})
				done <- err
			}()
			var pid string
			select {
			case pid = <-started.found:
			case <-time.After(time.Minute):
				t.Fatal("the child did not start")
			}
			if c.cancel {
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				n, _ := strconv.Atoi(pid)
				_ = syscall.Kill(n, syscall.SIGKILL)
				t.Fatal("the child was not killed")
			}
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, "pid "+pid)
			if c.cancel {
				require.ErrorIs(t, err, context.Canceled)
			} else {
				require.ErrorContains(t, err, "hanging child "+pid+" started", "the child's stderr is in the error")
			}
			n, _ := strconv.Atoi(pid)
			require.ErrorIs(t, syscall.Kill(n, 0), syscall.ESRCH, "child %d is gone", n)
		})
	}
}

// watchWriter sends the first submatch of re, at its first match, on found.
type watchWriter struct {
	re    *regexp.Regexp
	once  sync.Once
	found chan string
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if m := w.re.FindSubmatch(p); m != nil {
		w.once.Do(func() { w.found <- string(m[1]) })
	}
	return len(p), nil
}
