package main

// Test helpers: commands run in-process through cli() with their own
// context, writers and hooks, or as the built binary. Nothing sleeps to wait
// for a condition: tests wait on channels fed by engine observers, processor
// wrappers and log lines, each bounded by waitTimeout.

import (
	"bytes"
	"context"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

const waitTimeout = 60 * time.Second

// runCLI runs one command to completion in-process.
func runCLI(t *testing.T, h hooks, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var out, errb testutil.SyncBuffer
	code = cli(ctx, args, &env{stdout: &out, stderr: &errb, hooks: h})
	return code, out.String(), errb.String()
}

// proc is a command running in-process in its own goroutine.
type proc struct {
	cancel   context.CancelFunc
	done     chan struct{}
	code     int
	out, err testutil.SyncBuffer
	// logged is closed when a line of stderr contains the match given to
	// startCLIWatching.
	logged chan struct{}
}

func startCLI(t *testing.T, h hooks, args ...string) *proc {
	t.Helper()
	return startCLIWatching(t, h, "", args...)
}

// startCLIWatching starts a command whose stderr is watched for match.
func startCLIWatching(t *testing.T, h hooks, match string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{cancel: cancel, done: make(chan struct{}), logged: make(chan struct{})}
	var stderr io.Writer = &p.err
	if match != "" {
		stderr = &watchWriter{w: &p.err, match: []byte(match), ch: p.logged}
	}
	go func() {
		defer close(p.done)
		p.code = cli(ctx, args, &env{stdout: &p.out, stderr: stderr, hooks: h})
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// watchWriter closes ch at the first write containing match (slog writes
// one record per Write).
type watchWriter struct {
	w     io.Writer
	match []byte
	once  sync.Once
	ch    chan struct{}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.match) {
		w.once.Do(func() { close(w.ch) })
	}
	return w.w.Write(p)
}

// stop cancels the command's context (what SIGTERM does to the binary) and
// returns its exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the command did not stop within %v; stderr:\n%s", waitTimeout, tail(p.err.String()))
	}
	return p.code
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testutil.Recv(t, ch, waitTimeout, what)
}

// tail returns the last lines of a log for failure messages.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// watcher follows a consumer group's commits (from every member it is
// given to) and signals when they reach given ends.
type watcher struct {
	mu        sync.Mutex
	committed map[int32]int64
	waits     []waiter
}

type waiter struct {
	ends map[int32]int64
	ch   chan struct{}
}

func newWatcher() *watcher { return &watcher{committed: map[int32]int64{}} }

// reach returns a channel closed once the commits of every partition with a
// non-zero end have reached it.
func (w *watcher) reach(ends map[int32]int64) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := waiter{ends: ends, ch: make(chan struct{})}
	if !w.checkLocked(wt) {
		w.waits = append(w.waits, wt)
	}
	return wt.ch
}

func (w *watcher) commit(p int32, off int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed[p] = max(w.committed[p], off)
	kept := w.waits[:0]
	for _, wt := range w.waits {
		if !w.checkLocked(wt) {
			kept = append(kept, wt)
		}
	}
	w.waits = kept
}

// total is the sum of the partitions' committed offsets.
func (w *watcher) total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, off := range w.committed {
		n += off
	}
	return n
}

func (w *watcher) checkLocked(wt waiter) bool {
	for p, end := range wt.ends {
		if end > 0 && w.committed[p] < end {
			return false
		}
	}
	close(wt.ch)
	return true
}

// member is one group member's chain.Observer: it feeds the group's
// watcher and records the partitions the member began records of.
type member struct {
	w     *watcher
	mu    sync.Mutex
	begun map[int32]bool
}

func (w *watcher) member() *member { return &member{w: w, begun: map[int32]bool{}} }

func (m *member) Begin(b chain.BeginInfo) {
	m.mu.Lock()
	m.begun[b.Partition] = true
	m.mu.Unlock()
}

func (m *member) Advanced(string, int32, int, int64, time.Time)    {}
func (m *member) Committed(_ string, p int32, off int64, _ string) { m.w.commit(p, off) }
func (m *member) options() []chain.Option                          { return []chain.Option{chain.WithObserver(m)} }

func (m *member) partitions() map[int32]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.begun)
}

// pauser wraps one stage's processor: the after-th record it processes (over
// all partitions) blocks until release is closed, and its partition is sent
// on blocked. It keeps the processor's Sequencer (deduplication).
type pauser struct {
	stage   string
	after   int64
	n       atomic.Int64
	blocked chan int32
	release chan struct{}
}

func newPauser(stage string, after int64) *pauser {
	return &pauser{stage: stage, after: after, blocked: make(chan int32, 1), release: make(chan struct{})}
}

func (pz *pauser) wrap(stages []chain.Stage) []chain.Stage {
	for i := range stages {
		if stages[i].Name == pz.stage {
			stages[i].Processor = &pausing{inner: stages[i].Processor, pz: pz}
		}
	}
	return stages
}

type pausing struct {
	inner chain.Processor
	pz    *pauser
}

func (p *pausing) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return p.inner.(chain.Sequencer).Sequence(pc, ev)
}

func (p *pausing) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	if p.pz.n.Add(1) == p.pz.after {
		p.pz.blocked <- pc.Partition()
		select {
		case <-p.pz.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.inner.Process(ctx, pc, ev)
}

// topics are a test's input, output and dead-letter topics and group.
type topics struct {
	b                 *testbroker.Broker
	in, out, dlq      string
	group             string
	partitions        int32
	stateDir, brokers string
}

func newTopics(t *testing.T, partitions int32) *topics {
	b := testbroker.New(t)
	tp := &topics{
		b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
		group: testbroker.Name(t, "group"), partitions: partitions,
		stateDir: t.TempDir(), brokers: strings.Join(b.Addrs(), ","),
	}
	if b.Real() {
		// run creates the changelog topic; the broker helper deletes only
		// the topics it created.
		t.Cleanup(func() {
			if admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config()); err == nil {
				_ = admin.DeleteTopic(kafka.ChangelogTopic(tp.group, tp.in))
				_ = admin.Close()
			}
		})
	}
	return tp
}

// testRecordBytes keeps the workload's oversized records small.
const testRecordBytes = 4096

func testRules() attribution.Config {
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = testRecordBytes
	cfg.IdleTimeout = 100 * time.Millisecond // the runs' --idle-timeout, for the model's horizons
	return cfg
}

// produce writes a generated workload with the produce command.
func (tp *topics) produce(t *testing.T, records int, seed uint64) {
	t.Helper()
	code, out, errs := runCLI(t, hooks{}, "produce", "--brokers", tp.brokers, "--topic", tp.in,
		"--records", strconv.Itoa(records), "--seed", strconv.FormatUint(seed, 10),
		"--max-record-bytes", strconv.Itoa(testRecordBytes))
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "produced "+strconv.Itoa(records)+" records to "+tp.in)
}

// runArgs are the flags of `run` on the test's topics.
func (tp *topics) runArgs(extra ...string) []string {
	return append([]string{"run", "--brokers", tp.brokers, "--topic", tp.in, "--output", tp.out, "--dlq", tp.dlq,
		"--group", tp.group, "--state-dir", tp.stateDir, "--max-record-bytes", strconv.Itoa(testRecordBytes),
		"--commit-interval", "100ms", "--idle-timeout", "100ms", "--log-format", "json"}, extra...)
}

// input reads the input topic back as the engine saw it.
func (tp *topics) input(t *testing.T) (inputs [][]chain.Record, ends map[int32]int64) {
	t.Helper()
	inputs = make([][]chain.Record, tp.partitions)
	ends = map[int32]int64{}
	for p, msgs := range tp.b.ReadAll(t, tp.in, false) {
		for _, m := range msgs {
			r := chain.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
			inputs[p] = append(inputs[p], r)
		}
		if n := len(msgs); n > 0 {
			ends[p] = msgs[n-1].Offset + 1
		}
	}
	return inputs, ends
}

// check compares the output and dead-letter topics with the reference
// model over the input topic.
func (tp *topics) check(t *testing.T, o reference.Options) *reference.Report {
	t.Helper()
	inputs, _ := tp.input(t)
	return reference.Check(inputs, testRules(), reference.FromKafka(tp.b.ReadAll(t, tp.out, false)),
		reference.FromKafka(tp.b.ReadAll(t, tp.dlq, false)), o)
}

// verifyOutputs checks that the outputs and dead letters are the reference
// model's, each once, one key's outputs of a stage in offset order.
func (tp *topics) verifyOutputs(t *testing.T) *reference.Report {
	t.Helper()
	r := tp.check(t, reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	require.True(t, r.OK(), r.Summary())
	require.Positive(t, r.Installs.Matched)
	require.Positive(t, r.Purchases.Matched)
	require.Positive(t, r.DeadLetters.Matched)
	return r
}

// runToEnd runs `run` in-process until the group has committed every
// partition's end, then stops it like SIGTERM and checks the clean exit.
func (tp *topics) runToEnd(t *testing.T, extra ...string) *proc {
	t.Helper()
	return tp.runToEndWith(t, nil, extra...)
}

// runToEndWith is runToEnd with opts added to the chain's options.
func (tp *topics) runToEndWith(t *testing.T, opts []chain.Option, extra ...string) *proc {
	t.Helper()
	_, ends := tp.input(t)
	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: append(w.member().options(), opts...)}, tp.runArgs(extra...)...)
	reached := w.reach(ends)
	// The wait is on progress, not on a total time: under -race on a loaded
	// machine a run to the end can take minutes, and it fails only when no
	// partition's commit moved for waitTimeout.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, moved := w.total(), time.Now()
	for done := false; !done; {
		select {
		case <-reached:
			done = true
		case <-p.done:
			t.Fatalf("run exited with %d before the end; stderr:\n%s", p.code, tail(p.err.String()))
		case <-tick.C:
			if n := w.total(); n != last {
				last, moved = n, time.Now()
			} else if time.Since(moved) > waitTimeout {
				t.Fatalf("the group did not commit every partition's end: no commit moved for %v (committed %d in total); stderr:\n%s",
					waitTimeout, n, tail(p.err.String()))
			}
		}
	}
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
	return p
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

// binary builds the command once per test process.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "differential-bin-*")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "differential")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	require.NoError(t, buildErr, binPath)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
