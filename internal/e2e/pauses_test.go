package e2e_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// TestSIGKILLWithPausesNoConflictingDuplicates streams the input while the
// CLI runs with --idle-timeout 200ms, in bursts with one-second pauses
// (every quiet tail is an idle release), SIGKILLs the process mid-run and
// restarts it on the same state directory: the repeats of the outputs the
// killed process wrote must be byte-identical to their first copies (zero
// conflicting duplicates), and every output must equal the reference
// model's with the same idle timeout, for both guarantees. The releases
// are decided over the log, so the restarted process re-decides them the
// same way.
func TestSIGKILLWithPausesNoConflictingDuplicates(t *testing.T) {
	for _, g := range []string{"at-least-once", "exactly-once"} {
		t.Run(g, func(t *testing.T) {
			const partitions = 2
			b := testbroker.New(t)
			e := &env{b: b, in: b.Topic(t, partitions), out: b.Topic(t, partitions), dlq: b.Topic(t, 1),
				group: testbroker.Name(t, "pauses"), dir: t.TempDir()}
			e.args = []string{"--idle-timeout", "200ms", "--guarantee", g}
			wc := workload.DefaultConfig()
			wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, partitions, 300, 26
			wc.Span = 6 * time.Hour
			wc.LateClickFrac = 0.3
			wc.MaxRecordBytes = 16 << 10
			wc.Topic = e.in
			e.cfg = attribution.DefaultConfig()
			e.cfg.MaxRecordBytes = wc.MaxRecordBytes
			e.cfg.IdleTimeout = 200 * time.Millisecond
			recs := workload.Generate(wc)
			e.parts = workload.Split(recs, partitions)
			e.total = int64(len(recs))
			e.model = reference.Expect(e.parts, e.cfg)
			want := e.expectedOutputs()

			bin := buildCLI(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			counts := countOutputs(t, ctx, b, e.out, partitions)
			cmd, exited, logs := e.start(t, bin)

			// Stream: bursts of 300 records, a one-second pause after each.
			w, err := workload.NewWriter(workload.WriterConfig{Brokers: b.Addrs(), Sarama: b.Config(), Topic: e.in, Exact: true})
			require.NoError(t, err)
			streamed := make(chan error, 1)
			go func() {
				for i := range recs {
					if err := w.Send(ctx, &recs[i]); err != nil {
						streamed <- err
						return
					}
					if i%300 == 299 {
						time.Sleep(time.Second) // a pause longer than the idle timeout
					}
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
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			select {
			case err := <-exited:
				require.NoError(t, err, "exit 0 after SIGTERM\n%s", logs.String())
			case <-time.After(time.Minute):
				t.Fatal("no exit within a minute of SIGTERM")
			}
			readCommitted, dups := false, reference.IdenticalDuplicates
			if g == "exactly-once" {
				b.WaitStable(t, e.out)
				b.WaitStable(t, e.dlq)
				readCommitted, dups = true, reference.NoDuplicates
			}
			r := e.model.Check(reference.FromKafka(b.ReadAll(t, e.out, readCommitted)), reference.FromKafka(b.ReadAll(t, e.dlq, readCommitted)),
				reference.Options{Duplicates: dups})
			o := r.Outputs()
			require.Zero(t, o.ConflictingDuplicates, r.Summary())
			require.True(t, r.OK(), r.Summary())
			t.Logf("%s: %d outputs, %d repeated byte-identically, 0 conflicting", g, o.Distinct(), o.IdenticalDuplicates)
		})
	}
}
