// Package chainmetrics reports a chain's per-partition statistics as
// go-metrics gauges: the adapter between the engine's Stats and a
// metrics.Registry (the one sarama reports into), so the engine core owns no
// registry code.
//
// # What it owns
//
// For every partition the chain runs, from the moment its stages exist to
// the moment RunPartition returns, one functional gauge per series below in
// the registry given to Option; they are unregistered when the partition
// stops, so a revoked partition leaves no series behind. Every gauge reads
// the partition's current snapshot (chain.PartitionStats) when it is read.
//
//	differential.partition.<topic>.<partition>.{committed,commits,commit_errors,high_watermark,buffer_fill}
//	differential.stage.<topic>.<partition>.<stage>.{position,watermark_unix_ms,lag,mode_polling,
//	    mode_switches,processed,skipped,dead_lettered,retries,idle_releases,in_flight,
//	    last_progress_unix_ms}, and for followers gap_offsets, gap_ms and key_gated
//
// and, for a chain with a changelog, from the start of the partition's
// restore to the moment RunPartition returns:
//
//	differential.partition.<topic>.<partition>.{restore_records,restore_bytes,restoring}
//	    and restore_duration_seconds (a float gauge)
//
// and, for a chain in exactly-once mode (chain.WithExactlyOnce), from its
// first ended transaction on (chain.TxnObserver), or from RegisterTxn on
// (zero-valued until a transaction ends), for the whole process:
//
//	differential.txn.committed                  transactions committed (a counter)
//	differential.txn.aborted.<cause>            transactions aborted, one counter per chain.TxnAbortCause
//	differential.txn.cycle_ms                   commit cycles' durations, cut to the end of Commit or Abort, ms (a histogram)
//	differential.txn.records                    outputs, dead letters and changelog records per committed transaction (a histogram)
//
// (kafka.Transactor adds differential.txn.fenced, its producer sessions
// replaced because they were fenced.)
//
// # Concurrency
//
// The observer is safe for the chain's concurrent partitions; the gauges may
// be read from any goroutine.
package chainmetrics

import (
	"fmt"
	"sync"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
)

// Option makes a chain register its partitions' gauges in r (see the
// package doc). It may be combined with other chain.WithObserver options.
func Option(r metrics.Registry) chain.Option {
	return chain.WithObserver(&observer{r: r, names: map[partKey][]string{}, restoreNames: map[partKey][]string{}})
}

// Names of the exactly-once series (see the package doc).
const (
	TxnCommitted     = "differential.txn.committed"
	TxnAbortedPrefix = "differential.txn.aborted."
	TxnCycleMillis   = "differential.txn.cycle_ms"
	TxnRecords       = "differential.txn.records"
)

// txnMetrics are the exactly-once series, registered at the first ended
// transaction.
type txnMetrics struct {
	committed metrics.Counter
	aborted   map[chain.TxnAbortCause]metrics.Counter
	// cycle is a histogram, not a metrics.Timer: a Timer's meter starts a
	// goroutine that never ends, which no synctest bubble can hold.
	cycle   metrics.Histogram
	records metrics.Histogram
}

func (o *observer) txn() *txnMetrics {
	o.txnOnce.Do(func() { o.txnM = registerTxn(o.r) })
	return o.txnM
}

// RegisterTxn registers the exactly-once series in r now, zero-valued, so
// that a scrape sees them before the first transaction ends (a process
// that is restoring its state, or has no input yet, has ended none). The
// chain's observer (Option) finds and counts into the same series.
func RegisterTxn(r metrics.Registry) { registerTxn(r) }

func registerTxn(r metrics.Registry) *txnMetrics {
	m := &txnMetrics{aborted: map[chain.TxnAbortCause]metrics.Counter{}}
	m.committed = metrics.GetOrRegisterCounter(TxnCommitted, r)
	for _, c := range chain.TxnAbortCauses {
		m.aborted[c] = metrics.GetOrRegisterCounter(TxnAbortedPrefix+string(c), r)
	}
	m.cycle = metrics.GetOrRegisterHistogram(TxnCycleMillis, r, metrics.NewExpDecaySample(1028, 0.015))
	m.records = metrics.GetOrRegisterHistogram(TxnRecords, r, metrics.NewExpDecaySample(1028, 0.015))
	return m
}

// TxnEnded counts the transaction.
func (o *observer) TxnEnded(info chain.TxnInfo) {
	m := o.txn()
	m.cycle.Update(info.Duration.Milliseconds())
	if !info.Committed {
		c, ok := m.aborted[info.Cause]
		if !ok {
			c = metrics.GetOrRegisterCounter(TxnAbortedPrefix+string(info.Cause), o.r)
		}
		c.Inc(1)
		return
	}
	m.committed.Inc(1)
	m.records.Update(info.Outputs + info.ChangelogRecords)
}

type partKey struct {
	topic     string
	partition int32
}

// observer is the chain.PartitionObserver that (un)registers the gauges.
type observer struct {
	r metrics.Registry

	mu           sync.Mutex
	names        map[partKey][]string
	restoreNames map[partKey][]string

	txnOnce sync.Once
	txnM    *txnMetrics
}

var (
	_ chain.PartitionObserver = (*observer)(nil)
	_ chain.RestoreObserver   = (*observer)(nil)
	_ chain.TxnObserver       = (*observer)(nil)
)

func (o *observer) Begin(chain.BeginInfo)                         {}
func (o *observer) Advanced(string, int32, int, int64, time.Time) {}
func (o *observer) Committed(string, int32, int64, string)        {}

// PartitionStarted registers the partition's gauges.
func (o *observer) PartitionStarted(topic string, partition int32, stats func() chain.PartitionStats) {
	var names []string
	reg := func(name string, f func() int64) {
		names = append(names, name)
		_ = o.r.Register(name, metrics.NewFunctionalGauge(f))
	}
	part := func(f func(*chain.PartitionStats) int64) func() int64 {
		return func() int64 { ps := stats(); return f(&ps) }
	}
	base := fmt.Sprintf("differential.partition.%s.%d.", topic, partition)
	reg(base+"committed", part(func(ps *chain.PartitionStats) int64 { return ps.Committed }))
	reg(base+"commits", part(func(ps *chain.PartitionStats) int64 { return ps.Commits }))
	reg(base+"commit_errors", part(func(ps *chain.PartitionStats) int64 { return ps.CommitErrors }))
	reg(base+"high_watermark", part(func(ps *chain.PartitionStats) int64 { return ps.HighWatermark }))
	reg(base+"buffer_fill", part(func(ps *chain.PartitionStats) int64 { return int64(ps.BufferLen) }))
	for i, st := range stats().Stages {
		stage := func(f func(*chain.StageStats) int64) func() int64 {
			return func() int64 {
				ps := stats()
				if i >= len(ps.Stages) {
					return 0
				}
				return f(&ps.Stages[i])
			}
		}
		sb := fmt.Sprintf("differential.stage.%s.%d.%s.", topic, partition, st.Name)
		reg(sb+"position", stage(func(s *chain.StageStats) int64 { return s.Position }))
		reg(sb+"watermark_unix_ms", stage(func(s *chain.StageStats) int64 { return unixMilli(s.Watermark) }))
		reg(sb+"lag", stage(func(s *chain.StageStats) int64 { return s.Lag }))
		reg(sb+"mode_polling", stage(func(s *chain.StageStats) int64 {
			if s.Mode == "polling" {
				return 1
			}
			return 0
		}))
		reg(sb+"mode_switches", stage(func(s *chain.StageStats) int64 { return s.Switches }))
		reg(sb+"processed", stage(func(s *chain.StageStats) int64 { return s.Processed }))
		reg(sb+"skipped", stage(func(s *chain.StageStats) int64 { return s.Skipped }))
		reg(sb+"dead_lettered", stage(func(s *chain.StageStats) int64 { return s.DeadLettered }))
		reg(sb+"retries", stage(func(s *chain.StageStats) int64 { return s.Retries }))
		reg(sb+"idle_releases", stage(func(s *chain.StageStats) int64 { return s.IdleReleases }))
		reg(sb+"in_flight", stage(func(s *chain.StageStats) int64 { return int64(s.InFlight) }))
		if i > 0 {
			reg(sb+"gap_offsets", stage(func(s *chain.StageStats) int64 { return s.GapOffsets }))
			reg(sb+"gap_ms", stage(func(s *chain.StageStats) int64 { return s.GapTime.Milliseconds() }))
			reg(sb+"key_gated", stage(func(s *chain.StageStats) int64 { return int64(s.KeyGated) }))
		}
		reg(sb+"last_progress_unix_ms", stage(func(s *chain.StageStats) int64 { return unixMilli(s.LastProgress) }))
	}
	o.mu.Lock()
	o.names[partKey{topic, partition}] = names
	o.mu.Unlock()
}

// RestoreStarted registers the partition's restore gauges.
func (o *observer) RestoreStarted(topic string, partition int32, stats func() chain.PartitionStats) {
	base := fmt.Sprintf("differential.partition.%s.%d.", topic, partition)
	restore := func(f func(*chain.RestoreStats) int64) metrics.Gauge {
		return metrics.NewFunctionalGauge(func() int64 { ps := stats(); return f(&ps.Restore) })
	}
	gauges := map[string]any{
		base + "restore_records": restore(func(r *chain.RestoreStats) int64 { return r.Records }),
		base + "restore_bytes":   restore(func(r *chain.RestoreStats) int64 { return r.Bytes }),
		base + "restoring": restore(func(r *chain.RestoreStats) int64 {
			if r.Restoring {
				return 1
			}
			return 0
		}),
		base + "restore_duration_seconds": metrics.NewFunctionalGaugeFloat64(func() float64 { return stats().Restore.Duration.Seconds() }),
	}
	names := make([]string, 0, len(gauges))
	for n, g := range gauges {
		_ = o.r.Register(n, g)
		names = append(names, n)
	}
	o.mu.Lock()
	o.restoreNames[partKey{topic, partition}] = names
	o.mu.Unlock()
}

// RestoreStopped unregisters the partition's restore gauges.
func (o *observer) RestoreStopped(topic string, partition int32) {
	k := partKey{topic, partition}
	o.mu.Lock()
	names := o.restoreNames[k]
	delete(o.restoreNames, k)
	o.mu.Unlock()
	for _, n := range names {
		o.r.Unregister(n)
	}
}

// PartitionStopped unregisters the partition's gauges.
func (o *observer) PartitionStopped(topic string, partition int32) {
	k := partKey{topic, partition}
	o.mu.Lock()
	names := o.names[k]
	delete(o.names, k)
	o.mu.Unlock()
	for _, n := range names {
		o.r.Unregister(n)
	}
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
