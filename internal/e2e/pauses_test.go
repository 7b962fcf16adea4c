package e2e_test

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// The paused input: bursts of pauseBurst records, each followed by a pause
// of pauseGap, far longer than pauseIdle, the engine's --idle-timeout (and
// the model's), so that every quiet tail is an idle release.
const (
	pauseBurst = 300
	pauseGap   = time.Second
	pauseIdle  = 200 * time.Millisecond
)

// pausedInput generates the paused tests' workload for topic (late-heavy:
// many installs wait for a late click) and the model's configuration with
// the idle timeout the engine runs with.
func pausedInput(topic string, partitions int) ([]workload.Record, attribution.Config) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, partitions, 300, 26
	wc.Span = 6 * time.Hour
	wc.LateClickFrac = 0.3
	wc.MaxRecordBytes = 16 << 10
	wc.Topic = topic
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	cfg.IdleTimeout = pauseIdle
	return workload.Generate(wc), cfg
}

// bursts splits recs into the paused input's bursts.
func bursts(recs []workload.Record) [][]workload.Record {
	var out [][]workload.Record
	for i := 0; i < len(recs); i += pauseBurst {
		out = append(out, recs[i:min(i+pauseBurst, len(recs))])
	}
	return out
}

// pause is the quiet time after a burst. It paces the input, it does not
// wait for a condition: the engine must see the input go quiet for longer
// than its idle timeout.
func pause() { time.Sleep(pauseGap) }

// bySource reads an output topic's records back as one value per input
// record, named by its source header: the key and value bytes of the
// first copy. A later copy that differs from the first is a conflicting
// duplicate and fails the test.
func bySource(t *testing.T, ws []reference.Written) map[string]string {
	t.Helper()
	out := map[string]string{}
	conflicting := 0
	for _, w := range ws {
		src, ok := w.Header(attribution.SourceHeader)
		require.True(t, ok, "output %d/%d has no %s header", w.Partition, w.Offset, attribution.SourceHeader)
		v := string(w.Key) + "\x00" + string(w.Value)
		if first, seen := out[string(src)]; seen {
			if first != v {
				conflicting++
			}
			continue
		}
		out[string(src)] = v
	}
	require.Zero(t, conflicting, "conflicting duplicates in the output")
	return out
}

// requireSameOutputs requires two runs' outputs to be equal record for
// record: the same input records have an output, with the same bytes.
func requireSameOutputs(t *testing.T, what string, a, b map[string]string) {
	t.Helper()
	var diffs []string
	for src, v := range a {
		if w, ok := b[src]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only in the first run: %q", src, v))
		} else if w != v {
			diffs = append(diffs, fmt.Sprintf("%s: %q, then %q", src, v, w))
		}
	}
	for src, w := range b {
		if _, ok := a[src]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only in the second run: %q", src, w))
		}
	}
	n := len(diffs)
	require.Zero(t, n, "%s: %d of %d outputs differ; first: %v", what, n, max(len(a), len(b)), diffs[:min(n, 5)])
}

// TestSIGKILLWithPausesNoConflictingDuplicates processes one input three
// ways. The CLI runs with --idle-timeout 200ms while the input streams in
// bursts with one-second pauses (every quiet tail is an idle release); it
// is SIGKILLed mid-run and restarted on the same state directory: the
// repeats of the outputs the killed process wrote must be byte-identical
// to their first copies (zero conflicting duplicates), and every output
// must equal the reference model's with the same idle timeout. Then a new
// group (new state directory, its own output and dead-letter topics)
// processes the same topic from offset 0 as a backlog, with no pause to
// see: its outputs must be the first run's, record for record, byte for
// byte. Both guarantees. The releases are decided over the log, so the
// restart and the backfill decide them where the live run did.
func TestSIGKILLWithPausesNoConflictingDuplicates(t *testing.T) {
	t.Parallel()
	for _, g := range []string{"at-least-once", "exactly-once"} {
		t.Run(g, func(t *testing.T) {
			const partitions = 2
			b := testbroker.New(t)
			e := &env{b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
				group: testbroker.Name(t, "pauses"), dir: t.TempDir()}
			e.args = []string{"--idle-timeout", pauseIdle.String(), "--guarantee", g}
			recs, cfg := pausedInput(e.in, partitions)
			e.cfg = cfg
			e.parts = workload.Split(recs, partitions)
			e.total = int64(len(recs))
			e.model = reference.Expect(e.parts, e.cfg)
			want := e.expectedOutputs()

			bin := buildCLI(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			counts := countOutputs(t, ctx, b, e.out, partitions)
			cmd, exited, logs := e.start(t, bin)

			w, err := workload.NewWriter(workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: e.in, Exact: true})
			require.NoError(t, err)
			streamed := make(chan error, 1)
			go func() {
				for _, burst := range bursts(recs) {
					for i := range burst {
						if err := w.Send(ctx, &burst[i]); err != nil {
							streamed <- err
							return
						}
					}
					pause()
				}
				_, err := w.Close()
				streamed <- err
			}()

			waitCount(t, counts, want/3, exited, logs)
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			<-exited
			cmd, exited, logs = e.start(t, bin)
			require.NoError(t, <-streamed)
			waitCount(t, counts, want, exited, logs)
			stopCLI(t, cmd, exited, logs)
			readCommitted, dups := false, reference.IdenticalDuplicates
			if g == "exactly-once" {
				b.WaitStable(t, e.out)
				b.WaitStable(t, e.dlq)
				readCommitted, dups = true, reference.NoDuplicates
			}
			live := reference.FromKafka(b.ReadAll(t, e.out, readCommitted))
			r := e.model.Check(live, reference.FromKafka(b.ReadAll(t, e.dlq, readCommitted)), reference.Options{Duplicates: dups})
			o := r.Outputs()
			require.Zero(t, o.ConflictingDuplicates, r.Summary())
			require.True(t, r.OK(), r.Summary())
			t.Logf("%s live, killed and restarted: %d outputs, %d repeated byte-identically, 0 conflicting", g, o.Distinct(), o.IdenticalDuplicates)

			// The same topic from offset 0 in a new group, on the whole
			// backlog.
			fresh := *e
			fresh.out, fresh.dlq = b.Topic(t, partitions), b.Topic(t, 1)
			fresh.group, fresh.dir = testbroker.Name(t, "pauses-backfill"), t.TempDir()
			if b.Real() {
				t.Cleanup(func() { deleteChangelogs(b, e.in, e.group, fresh.group) })
			}
			counts = countOutputs(t, ctx, b, fresh.out, partitions)
			cmd, exited, logs = fresh.start(t, bin)
			waitCount(t, counts, want, exited, logs)
			stopCLI(t, cmd, exited, logs)
			if readCommitted {
				b.WaitStable(t, fresh.out)
				b.WaitStable(t, fresh.dlq)
			}
			backfill := reference.FromKafka(b.ReadAll(t, fresh.out, readCommitted))
			rb := e.model.Check(backfill, reference.FromKafka(b.ReadAll(t, fresh.dlq, readCommitted)), reference.Options{Duplicates: dups})
			require.True(t, rb.OK(), "backfill: %s", rb.Summary())
			first, second := bySource(t, live), bySource(t, backfill)
			requireSameOutputs(t, "live with pauses and a SIGKILL, then from offset 0 in a new group", first, second)
			t.Logf("%s from offset 0 in a new group: %d outputs, equal record for record to the live run's", g, len(second))
		})
	}
}

// stopCLI sends SIGTERM and requires exit 0 within a minute.
func stopCLI(t *testing.T, cmd *exec.Cmd, exited <-chan error, logs *logTail) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "exit 0 after SIGTERM\n%s", logs.String())
	case <-time.After(time.Minute):
		t.Fatal("no exit within a minute of SIGTERM")
	}
}

// deleteChangelogs deletes the groups' changelog topics of in from a real
// broker, which outlives the test.
func deleteChangelogs(b *testbroker.Broker, in string, groups ...string) {
	admin, err := sarama.NewClusterAdmin(b.Addrs(), b.Config())
	if err != nil {
		return
	}
	defer admin.Close()
	for _, g := range groups {
		_ = admin.DeleteTopic(kafka.ChangelogTopic(g, in))
	}
}

// TestScaleOutWithPausesNoConflictingDuplicates streams the paused input
// (--idle-timeout 200ms, one-second pauses) to a group that starts with
// one instance; a second joins mid-run and takes partitions over, then
// the first is SIGKILLed and a third replaces it. Every output must equal
// the reference model's with the same idle timeout, with zero conflicting
// duplicates (at-least-once: repeats byte-identical; exactly-once: none
// at all to a read_committed reader); the commits reach the ends and each
// partition's changelog holds the model's final state.
func TestScaleOutWithPausesNoConflictingDuplicates(t *testing.T) {
	t.Parallel()
	for _, g := range []string{"at-least-once", "exactly-once"} {
		t.Run(g, func(t *testing.T) {
			const partitions = 4
			// After the fleet's own --idle-timeout: the last one counts.
			f := newFleet(t, buildCLI(t), "pauses-fleet", partitions, "sticky", g == "exactly-once", "--idle-timeout", pauseIdle.String())
			recs, cfg := pausedInput(f.in, partitions)
			f.cfg = cfg

			bs := bursts(recs)
			a := f.start(t, "a")
			var bm *member
			for i, burst := range bs {
				switch i {
				case len(bs) / 4: // b joins while the input streams
					f.produce(t, burst)
					bm = f.start(t, "b")
				case len(bs) / 2:
					// b has partitions of its own before a is killed (a
					// member killed while its join is pending stays in the
					// embedded broker's group: see testFleet); a is killed
					// in the middle of a burst, while it works through it.
					f.waitStarted(t, bm)
					f.produce(t, burst[:len(burst)/2])
					f.kill(t, a)
					f.start(t, "c")
					f.produce(t, burst[len(burst)/2:])
				default:
					f.produce(t, burst)
				}
				pause()
			}
			// The last burst's tail is released by the quiet tail, with no
			// sentinel.
			f.waitCovered(t, 0, "b, c after a was killed: everything")
			for _, m := range f.members {
				f.stop(t, m)
			}
			if f.exactlyOnce {
				f.b.WaitStable(t, f.out)
				f.b.WaitStable(t, f.dlq)
			}
			f.verify(t)
		})
	}
}
