package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
)

// buildCLI builds cmd/differential into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "differential")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/differential-dev/differential/cmd/differential")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run(), "go build")
	return bin
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
				var src string
				for _, h := range m.Headers {
					if string(h.Key) == attribution.SourceHeader {
						src = string(h.Value)
					}
				}
				var k struct{ Kind string }
				_ = json.Unmarshal(m.Value, &k)
				seen[src+"/"+k.Kind] = true
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

func waitCount(t *testing.T, counts <-chan int, want int, exited <-chan error) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case n := <-counts:
			if n >= want {
				return
			}
		case err := <-exited:
			t.Fatalf("differential exited early: %v", err)
		case <-deadline:
			t.Fatalf("fewer than %d distinct outputs after 3 minutes", want)
		}
	}
}

// start runs `differential run` and returns a channel that gets its exit.
func (e *env) start(t *testing.T, bin string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(bin, "run",
		"--brokers", strings.Join(e.b.Addrs(), ","), "--topic", e.in, "--output", e.out, "--dlq", e.dlq,
		"--group", e.group, "--state-dir", e.dir, "--commit-interval", "100ms", "--idle-timeout", "200ms",
		"--max-record-bytes", "16384", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() {
		// Keep the last lines for a failure message.
		var tail []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tail = append(tail, sc.Text())
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		err := cmd.Wait()
		if err != nil && err.Error() != "signal: killed" {
			t.Logf("differential exited: %v; last log lines:\n%s", err, strings.Join(tail, "\n"))
		}
		exited <- err
	}()
	return cmd, exited
}

// TestSIGKILLRestartNoLossNoDoubleEffect builds the CLI, runs the
// attribution job as a real process, kills it with SIGKILL once a third of
// the outputs exist, restarts it on the same state directory, lets it
// finish, stops it with SIGTERM (exit 0), and checks the same as the
// in-process crash test: nothing lost, repeats byte-identical, dead letters
// exact, offsets committed to the end, Pebble state equal to the model's.
func TestSIGKILLRestartNoLossNoDoubleEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the CLI")
	}
	const partitions = 4
	b := testbroker.New(t)
	e := &env{b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
		group: testbroker.Name(t, "kill"), dir: t.TempDir()}
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 40_000, partitions, 2000, 99
	wc.MaxRecordBytes = 16 << 10
	e.cfg = attribution.DefaultConfig()
	e.cfg.MaxRecordBytes = wc.MaxRecordBytes
	e.produce(t, wc)
	want := e.expectedOutputs()
	bin := buildCLI(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := countOutputs(t, ctx, b, e.out, partitions)

	cmd, exited := e.start(t, bin)
	waitCount(t, counts, want/3, exited)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err := <-exited
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "signal: killed", ee.Error())

	cmd, exited = e.start(t, bin)
	waitCount(t, counts, want, exited)
	// Every output exists; let the restarted process commit, then stop it.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "exit 0 after SIGTERM")
	case <-time.After(time.Minute):
		t.Fatal("no exit within a minute of SIGTERM")
	}
	e.verify(t)
}
