package chainmetrics_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainmetrics"
	"github.com/differential-dev/differential/chain/chaintest"
)

var decoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	return chain.Decoded{Type: string(r.Value), Time: r.Timestamp}, nil
})

var noop = chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })

// The gauges exist while a partition runs, read its statistics, and are
// gone once it stopped; the adapter composes with the tester's own observer
// (WaitIdle still returns).
func TestGaugesFollowThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := metrics.NewRegistry()
		tt := chaintest.New(t, []chain.Stage{{Name: "a", Processor: noop}, {Name: "b", Processor: noop}}, decoder,
			chainmetrics.Option(reg), chain.WithIdleTimeout(time.Millisecond))
		tt.Start(3)
		ts := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		tt.Feed(3, chaintest.Rec("k", "x", ts), chaintest.Rec("k", "x", ts.Add(time.Second)))
		gauge := func(name string) int64 {
			g, ok := reg.Get(name).(metrics.Gauge)
			require.True(t, ok, "%s registered", name)
			return g.Snapshot().Value()
		}
		require.Equal(t, int64(2), gauge("differential.stage.input.3.b.position"))
		require.Equal(t, int64(2), gauge("differential.stage.input.3.a.processed"))
		require.Equal(t, ts.Add(time.Second).UnixMilli(), gauge("differential.stage.input.3.b.watermark_unix_ms"))
		require.Equal(t, int64(0), gauge("differential.stage.input.3.b.gap_offsets"))
		require.Nil(t, reg.Get("differential.stage.input.3.a.gap_offsets"), "the first stage has no leader")
		require.Equal(t, int64(2), gauge("differential.partition.input.3.high_watermark"))
		require.NoError(t, tt.Stop())
		n := 0
		reg.Each(func(string, any) { n++ })
		require.Zero(t, n, "a stopped partition leaves no series behind")
	})
}

// With a changelog, the restore gauges exist from the restore on: records
// and bytes applied, the duration, and whether it still runs; they are gone
// with the partition.
func TestRestoreGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keep := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			return pc.State().Set(e.Key, e.Value, time.Time{})
		})
		reg := metrics.NewRegistry()
		tt := chaintest.New(t, []chain.Stage{{Name: "a", Processor: keep}}, decoder,
			chainmetrics.Option(reg), chain.WithIdleTimeout(time.Millisecond))
		tt.UseChangelog()
		tt.Start(0)
		ts := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		tt.Feed(0, chaintest.Rec("k1", "x", ts), chaintest.Rec("k2", "y", ts))
		require.NoError(t, tt.Move("b", 0)) // no local state: restored from the changelog
		tt.WaitIdle()
		gauge := func(name string) int64 {
			g, ok := reg.Get(name).(metrics.Gauge)
			require.True(t, ok, "%s registered", name)
			return g.Snapshot().Value()
		}
		require.Equal(t, int64(2), gauge("differential.partition.input.0.restore_records"))
		require.Positive(t, gauge("differential.partition.input.0.restore_bytes"))
		require.Zero(t, gauge("differential.partition.input.0.restoring"))
		_, ok := reg.Get("differential.partition.input.0.restore_duration_seconds").(metrics.GaugeFloat64)
		require.True(t, ok)
		require.NoError(t, tt.Stop())
		n := 0
		reg.Each(func(string, any) { n++ })
		require.Zero(t, n, "a stopped partition leaves no series behind")
	})
}

// In exactly-once mode every ended transaction is counted: committed ones
// with their records (outputs and changelog records), aborted ones by
// cause, and every cycle's duration; the series outlive the partitions
// (they are the process's).
func TestTransactionMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
			pc.Emit(chain.Message{Key: e.Key, Value: []byte("out")})
			return pc.State().Set(e.Key, e.Value, time.Time{})
		})
		reg := metrics.NewRegistry()
		tt := chaintest.New(t, []chain.Stage{{Name: "a", Processor: count}}, decoder,
			chainmetrics.Option(reg), chain.WithIdleTimeout(time.Millisecond), chain.WithCommitInterval(10*time.Millisecond))
		tt.UseChangelog()
		x := tt.UseTransactions()
		require.Nil(t, reg.Get(chainmetrics.TxnCommitted), "no series before the first transaction")
		tt.Start(0)
		ts := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		tt.Feed(0, chaintest.Rec("k1", "x", ts), chaintest.Rec("k2", "y", ts))
		tt.WaitCommitted(0, 2)
		// The observer hears of a transaction after its commit is visible:
		// let every goroutine settle before reading the series.
		synctest.Wait()
		counter := func(name string) int64 {
			c, ok := reg.Get(name).(metrics.Counter)
			require.True(t, ok, "%s registered", name)
			return c.Snapshot().Count()
		}
		commits, _ := x.Counts()
		require.Equal(t, int64(commits), counter(chainmetrics.TxnCommitted))
		recs, ok := reg.Get(chainmetrics.TxnRecords).(metrics.Histogram)
		require.True(t, ok)
		require.Equal(t, int64(4), recs.Snapshot().Sum(), "2 outputs and 2 changelog records")
		require.Equal(t, int64(commits), recs.Snapshot().Count())

		x.FailCommits(1)
		tt.Feed(0, chaintest.Rec("k3", "z", ts))
		tt.WaitCommitted(0, 3)
		x.FailProduce(1)
		tt.Feed(0, chaintest.Rec("k4", "z", ts))
		tt.WaitCommitted(0, 4)
		require.NoError(t, tt.Stop())

		commits, aborts := x.Counts()
		require.Equal(t, int64(commits), counter(chainmetrics.TxnCommitted))
		require.Equal(t, int64(1), counter(chainmetrics.TxnAbortedPrefix+string(chain.TxnAbortCommit)))
		require.Equal(t, int64(1), counter(chainmetrics.TxnAbortedPrefix+string(chain.TxnAbortSend)))
		require.Zero(t, counter(chainmetrics.TxnAbortedPrefix+string(chain.TxnAbortDrain)))
		require.GreaterOrEqual(t, aborts, 2)
		cycles, ok := reg.Get(chainmetrics.TxnCycleMillis).(metrics.Histogram)
		require.True(t, ok)
		require.Equal(t, int64(commits+2), cycles.Snapshot().Count(), "every ended transaction's cycle is timed")
		require.Equal(t, int64(8), recs.Snapshot().Sum(), "the aborted cycles' records are not counted; their records commit again")
	})
}
