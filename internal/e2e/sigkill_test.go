package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// cli is the cmd/differential binary every test of the process runs,
// built once (a link of it is seconds of CPU); TestMain removes its
// directory.
var cli struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildCLI returns the path of cmd/differential built for this test
// process.
func buildCLI(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() {
		if cli.dir, cli.err = os.MkdirTemp("", "differential-e2e-*"); cli.err != nil {
			return
		}
		cli.path = filepath.Join(cli.dir, "differential")
		out, err := exec.Command("go", "build", "-o", cli.path, "github.com/differential-dev/differential/cmd/differential").CombinedOutput()
		if err != nil {
			cli.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, cli.err)
	return cli.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cli.dir != "" {
		_ = os.RemoveAll(cli.dir)
	}
	os.Exit(code)
}

// outputCounter consumes every partition of the output topic from the
// start and signals when a number of distinct outputs has been seen.
type outputCounter struct {
	seen  map[string]bool
	count chan int
}

func countOutputs(t *testing.T, ctx context.Context, b *testbroker.Broker, topic string, partitions int) <-chan int {
	t.Helper()
	cons, err := sarama.NewConsumer(b.Addrs(), b.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cons.Close() })
	msgs := make(chan *sarama.ConsumerMessage, 1024)
	for p := range partitions {
		pc, err := cons.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		require.NoError(t, err)
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
		t.Cleanup(pc.AsyncClose)
	}
	counts := make(chan int, 1)
	go func() {
		seen := map[string]bool{}
		for {
			select {
			case m := <-msgs:
				// An input record has at most one output: its source
				// header identifies it.
				for _, h := range m.Headers {
					if string(h.Key) == attribution.SourceHeader {
						seen[string(h.Value)] = true
					}
				}
				select { // keep only the latest count
				case <-counts:
				default:
				}
				counts <- len(seen)
			case <-ctx.Done():
				return
			}
		}
	}()
	return counts
}

func waitCount(t *testing.T, counts <-chan int, want int, exited <-chan error, logs *logTail) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	seen := 0
	for {
		select {
		case n := <-counts:
			seen = n
			if n >= want {
				return
			}
		case err := <-exited:
			t.Fatalf("differential exited early: %v\n%s", err, logs.String())
		case <-deadline:
			if d := os.Getenv("DIFFERENTIAL_E2E_DUMP"); d != "" && logs.proc != nil {
				_ = logs.proc.Signal(syscall.SIGQUIT) // goroutine dump to the log file
				<-exited
			}
			t.Fatalf("%d of %d distinct outputs after 3 minutes; last log lines:\n%s", seen, want, logs.String())
		}
	}
}

// logTail keeps the last lines a process wrote.
type logTail struct {
	mu    sync.Mutex
	lines []string
	proc  *os.Process
	file  *os.File
}

func (l *logTail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_, _ = l.file.WriteString(s + "\n")
	}
	l.lines = append(l.lines, s)
	if len(l.lines) > 40 {
		l.lines = l.lines[1:]
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// start runs `differential run` and returns a channel that gets its exit.
func (e *env) start(t *testing.T, bin string) (*exec.Cmd, <-chan error, *logTail) {
	t.Helper()
	level := "info"
	if os.Getenv("DIFFERENTIAL_E2E_DUMP") != "" {
		level = "debug" // sarama's client log too
	}
	cmd := exec.Command(bin, "run",
		"--brokers", strings.Join(e.b.Addrs(), ","), "--topic", e.in, "--output", e.out, "--dlq", e.dlq,
		"--group", e.group, "--state-dir", e.dir, "--commit-interval", "100ms", "--idle-timeout", idleTimeout,
		"--max-record-bytes", "16384", "--log-format", "json", "--log-level", level,
		// A test without --guarantee in e.args means at-least-once (the
		// default is exactly-once); e.args' own --guarantee comes later and
		// counts.
		"--guarantee", "at-least-once")
	cmd.Args = append(cmd.Args, e.args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	logs := &logTail{proc: cmd.Process}
	if d := os.Getenv("DIFFERENTIAL_E2E_DUMP"); d != "" {
		logs.file, _ = os.Create(filepath.Join(d, fmt.Sprintf("differential-%d.log", cmd.Process.Pid)))
	}
	go func() {
		// Keep the last lines for a failure message.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	return cmd, exited, logs
}

// TestSIGKILLRestartNoLossNoDoubleEffect builds the CLI, runs the
// attribution job as a real process, kills it with SIGKILL once a third of
// the outputs exist, restarts it on the same state directory, lets it
// finish, stops it with SIGTERM (exit 0), and checks the same as the
// in-process crash test: nothing lost, repeats byte-identical, dead letters
// exact, offsets committed to the end, Pebble state equal to the model's.
// DIFFERENTIAL_E2E_DUMP=dir keeps both processes' logs there (at debug
// level, sarama's client log included) and makes the test SIGQUIT a process
// that stops making progress, for a goroutine dump.
func TestSIGKILLRestartNoLossNoDoubleEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "kill", 40_000, 2000, 99)
	e.sigkillRestart(t)
	e.verify(t)
}

// TestExactlyOnceSIGKILLRestart is TestSIGKILLRestartNoLossNoDoubleEffect
// with --guarantee exactly-once: the process is SIGKILLed with a
// transaction open (outputs of the cycle already in the log), restarted on
// the same state directory — the same transactional id, which fences the
// dead process and aborts its transaction — and a read_committed reader
// then sees every output and dead letter exactly once, nothing else; the
// Pebble cache ends equal to the model's state.
func TestExactlyOnceSIGKILLRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "eoskill", 40_000, 2000, 99)
	e.args = []string{"--guarantee", "exactly-once"}
	e.sigkillRestart(t)
	e.b.WaitStable(t, e.out)
	e.b.WaitStable(t, e.dlq)
	e.verifyWith(t, true, reference.NoDuplicates)
	// The killed process's open transaction is in the log, aborted: a
	// read_uncommitted reader sees its outputs repeated.
	all := e.model.Check(reference.FromKafka(e.b.ReadAll(t, e.out, false)), nil, reference.Options{Duplicates: reference.IdenticalDuplicates})
	t.Logf("read_uncommitted: %d outputs repeated (aborted transactions, invisible to read_committed)", all.Outputs().IdenticalDuplicates)
}

// sigkillRestart starts the CLI, SIGKILLs it once a third of the outputs
// exist, restarts it on the same state directory, waits for every output
// and stops it with SIGTERM (exit 0).
func (e *env) sigkillRestart(t *testing.T) {
	t.Helper()
	want := e.expectedOutputs()
	bin := buildCLI(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := countOutputs(t, ctx, e.b, e.out, len(e.parts))

	cmd, exited, logs := e.start(t, bin)
	waitCount(t, counts, want/3, exited, logs)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err := <-exited
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "signal: killed", ee.Error())

	cmd, exited, logs = e.start(t, bin)
	waitCount(t, counts, want, exited, logs)
	// Every output exists; let the restarted process commit, then stop it.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "exit 0 after SIGTERM\n%s", logs.String())
	case <-time.After(time.Minute):
		t.Fatal("no exit within a minute of SIGTERM")
	}
}
