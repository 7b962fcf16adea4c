package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/kafka"
)

// The delivery guarantees the exactly-once cost table (Options.EOSCost)
// measures, as `differential run --guarantee` names them.
const (
	GuaranteeAtLeastOnce = "at-least-once"
	GuaranteeExactlyOnce = "exactly-once"
)

// Guarantees are the delivery guarantees Run knows.
var Guarantees = []string{GuaranteeAtLeastOnce, GuaranteeExactlyOnce}

// CostTarget is the exactly-once cost bar: exactly-once may cost at most this
// fraction of at-least-once throughput at TargetInterval.
const (
	CostTarget     = 0.10
	TargetInterval = time.Second
)

// CostResult is the exactly-once cost table of one workload
// (WorkloadResult.EOSCost): the chain in each guarantee at each commit
// interval, on the same stream, with the same gate scope (Options.Gate).
type CostResult struct {
	Gate string    `json:"gate"`
	Rows []CostRow `json:"rows"`
}

// CostRow is one commit interval: one cell per guarantee (in
// Options.Guarantees' order) and, with both, the cost.
type CostRow struct {
	CommitInterval string     `json:"commit_interval"`
	Cells          []CostCell `json:"cells"`
	// Cost is 1 − exactly-once ÷ at-least-once throughput (0.1: exactly-once
	// is 10 % slower); null unless both guarantees ran.
	Cost *float64 `json:"cost,omitempty"`
	// LatencyRateRPS is the offered load of both cells' latency runs:
	// LatencyLoad × the slower cell's throughput.
	LatencyRateRPS float64 `json:"latency_offered_rps,omitempty"`
}

// CostCell is one guarantee at one commit interval: a throughput run
// sized by time (checked against the reference model like every run;
// exactly-once's outputs read read_committed) and a latency run at the
// row's offered load.
type CostCell struct {
	Guarantee string        `json:"guarantee"`
	Gate      string        `json:"gate"`
	Run       *DesignResult `json:"run"`
	// Latency: for exactly-once, the time from the input handed to the
	// producer until the transaction holding its output committed (when a
	// read_committed reader can see it); for at-least-once, until the
	// output was acknowledged.
	Latency *LatencyResult `json:"latency,omitempty"`
	// Txn is where the commit path's time went in the throughput run.
	Txn *TxnStats `json:"txn,omitempty"`
}

// TxnStats times the commit path of a throughput run (the whole run, the
// start-up and the final commit included): the changelog appends (for
// exactly-once inside the transaction, one partition after another while
// every partition is paused) and, for exactly-once, the Transactor's
// Commit (AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and aborts. A cycle's
// commit path is the wall time from its first changelog append to the end
// of its Commit: a part of the cycle's pause (the drain, which waits for
// every begun record to complete, comes before it and is not seen from
// outside the chain). PathFraction is their sum ÷ the measured window.
type TxnStats struct {
	Commits      int64   `json:"txn_commits"`
	Aborts       int64   `json:"txn_aborts"`
	CommitMeanMs float64 `json:"txn_commit_mean_ms"`
	CommitMaxMs  float64 `json:"txn_commit_max_ms"`
	Appends      int64   `json:"changelog_appends"`
	AppendMeanMs float64 `json:"changelog_append_mean_ms"`
	PathMeanMs   float64 `json:"commit_path_mean_ms,omitempty"`
	// Sends and SendMeanMs: the outputs' and dead letters' sends (Produce
	// calls) and their mean time to the acknowledgement — a record is
	// complete, and its stage's position (the follower's gate) moves past
	// it, only once its outputs are acknowledged.
	Sends        int64   `json:"sends"`
	SendMeanMs   float64 `json:"send_ack_mean_ms"`
	PathFraction float64 `json:"commit_path_fraction,omitempty"`
}

// cell returns the row's cell of guarantee g (nil: not measured).
func (r *CostRow) cell(g string) *CostCell {
	for i := range r.Cells {
		if r.Cells[i].Guarantee == g {
			return &r.Cells[i]
		}
	}
	return nil
}

// runCost measures the exactly-once cost table at one point: for each
// commit interval, the chain in each guarantee (Pebble state and a
// changelog in both, as `differential run` does by default), each a
// throughput run sized by time (at least 12.5 of its intervals, ten
// checkpoints and ten commits) and a latency run at LatencyLoad × the
// slower cell's throughput.
func (h *harness) runCost(ctx context.Context, pt point) (*WorkloadResult, error) {
	t0 := time.Now()
	pr := h.newPointRun(pt)
	defer pr.close()
	gate := h.o.Gate
	cr := &CostResult{Gate: string(gate)}
	wr := &WorkloadResult{Workload: pt.name, Partitions: pt.wc.Partitions, Workers: pt.workers, Gate: string(gate),
		DurationS: h.o.Duration.Seconds(), CommitInterval: fmt.Sprint(h.o.CommitIntervals), EOSCost: cr}
	h.progressf("workload %s P=%d W=%d, exactly-once cost (gate %s): %s (generated in %v)", pt.name, pt.wc.Partitions, pt.workers, gate, pr.st, time.Since(t0).Round(time.Millisecond))
	hint := chainGuess(pt)
	for _, iv := range h.o.CommitIntervals {
		row := CostRow{CommitInterval: iv.String()}
		for _, g := range h.o.Guarantees {
			v := chainVariant{name: g + ", " + string(gate) + " gate, commit " + iv.String(), gate: gate, commitInterval: iv, guarantee: g}
			r, err := h.steady(ctx, pr, runSpec{kind: kindChain, variant: &v}, hint)
			if r != nil {
				row.Cells = append(row.Cells, CostCell{Guarantee: g, Gate: string(gate), Run: r, Txn: r.txn})
			}
			if err != nil {
				cr.Rows = append(cr.Rows, row)
				return wr, err
			}
			hint = r.ThroughputRPS
		}
		if a, e := row.cell(GuaranteeAtLeastOnce), row.cell(GuaranteeExactlyOnce); a != nil && e != nil && a.Run.ThroughputRPS > 0 {
			c := 1 - e.Run.ThroughputRPS/a.Run.ThroughputRPS
			row.Cost = &c
		}
		if !h.o.NoLatency {
			slowest := row.Cells[0].Run.ThroughputRPS
			for _, c := range row.Cells {
				slowest = min(slowest, c.Run.ThroughputRPS)
			}
			row.LatencyRateRPS = h.o.LatencyLoad * slowest
			for i := range row.Cells {
				c := &row.Cells[i]
				v := chainVariant{name: c.Run.Variant, gate: gate, commitInterval: iv, guarantee: c.Guarantee}
				l, err := h.costLatency(ctx, pr, &v, row.LatencyRateRPS)
				c.Latency = l
				if err != nil {
					cr.Rows = append(cr.Rows, row)
					return wr, err
				}
			}
		}
		cr.Rows = append(cr.Rows, row)
	}
	wr.Params = pr.st.String()
	return wr, nil
}

// costLatency is one cell's latency run: as latencyPhase's, on a fresh
// topic, one second's worth of records at once (not measured), then the
// following ones open loop at rate for max(LatencyDuration, 3 commit
// intervals), then up to max(1s, 1.5 intervals) more, not measured (an
// exactly-once output is visible only once its cycle commits: the tail
// keeps the measured records' commits regular cycles, not the final one
// of the stop).
func (h *harness) costLatency(ctx context.Context, pr *pointRun, v *chainVariant, rate float64) (*LatencyResult, error) {
	li, err := h.latencyInput(pr, rate, max(h.o.LatencyDuration, 3*v.commitInterval), max(latencyTail, v.commitInterval*3/2))
	if err != nil {
		return nil, err
	}
	r, err := h.latencyRun(ctx, li, runSpec{kind: kindChain, variant: v})
	if r == nil {
		return nil, err
	}
	return r.latencyResult(), err
}

// costWiring builds a cost-table run's delivery: a changelog (both
// guarantees, as `differential run` by default) and, for exactly-once, the
// Transactor in place of the producer. The returned options replace
// WithProducer; closers release what it opened (the changelog topic is
// deleted).
func (h *harness) costWiring(d *design, s runSpec, group string) ([]chain.Option, *txnTimer, error) {
	v := s.variant
	c := h.c
	cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{
		Brokers: c.Addrs(), InputTopic: s.topic, Group: group, Sarama: c.Config(), Logger: h.o.Logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: changelog: %w", err)
	}
	// The changelog is closed after the chain stopped (flush), and its
	// topic deleted with the design's.
	d.flushers = append([]func() error{cl.Close}, d.flushers...)
	d.closers = append(d.closers, func() error { c.deleteTopics(cl.Topic()); return nil })
	tt := &txnTimer{}
	opts := []chain.Option{chain.WithChangelog(timedChangelog{cl, tt})}
	if v.guarantee != GuaranteeExactlyOnce {
		return opts, tt, nil
	}
	tx, err := kafka.NewTransactor(kafka.TransactorConfig{
		Brokers: c.Addrs(), TransactionalID: c.name("txn"), Timeout: max(kafka.DefaultTransactionTimeout, 2*v.commitInterval),
		Changelog: cl, Sarama: c.Config(), Logger: h.o.Logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: transactional producer: %w", err)
	}
	// Closed before the changelog (it sends to it) and the store.
	d.flushers = append([]func() error{tx.Close}, d.flushers...)
	d.committed = true
	opts = append(opts, chain.WithExactlyOnce(&ackTransactor{inner: tx, log: d.acks, t: tt}))
	return opts, tt, nil
}

// txnTimer sums the commit path's times of one run (TxnStats).
type txnTimer struct {
	commits, aborts, appends  atomic.Int64
	commitNs, appendNs        atomic.Int64
	commitMax                 atomic.Int64
	cycleStart, pathNs, paths atomic.Int64 // exactly-once: the cycles' commit paths
	sends, sendNs             atomic.Int64 // Produce → its acknowledgement
}

// timeSend wraps a Produce's done to time the send (t nil: done itself).
func (t *txnTimer) timeSend(done func(error)) func(error) {
	if t == nil {
		return done
	}
	t0 := time.Now()
	return func(err error) {
		t.sends.Add(1)
		t.sendNs.Add(int64(time.Since(t0)))
		done(err)
	}
}

func (t *txnTimer) appended(t0 time.Time) {
	t.appends.Add(1)
	t.appendNs.Add(int64(time.Since(t0)))
}

func (t *txnTimer) stats(elapsed float64) *TxnStats {
	s := &TxnStats{Commits: t.commits.Load(), Aborts: t.aborts.Load(), Appends: t.appends.Load(),
		CommitMaxMs: ms(time.Duration(t.commitMax.Load()))}
	if s.Commits > 0 {
		s.CommitMeanMs = ms(time.Duration(t.commitNs.Load() / s.Commits))
	}
	if s.Appends > 0 {
		s.AppendMeanMs = ms(time.Duration(t.appendNs.Load() / s.Appends))
	}
	if n := t.sends.Load(); n > 0 {
		s.Sends, s.SendMeanMs = n, ms(time.Duration(t.sendNs.Load()/n))
	}
	if n := t.paths.Load(); n > 0 {
		s.PathMeanMs = ms(time.Duration(t.pathNs.Load() / n))
		if elapsed > 0 {
			s.PathFraction = time.Duration(t.pathNs.Load()).Seconds() / elapsed
		}
	}
	return s
}

// ackTransactor is ackProducer for exactly-once mode: an output counts as
// delivered when the transaction holding it commits (a read_committed
// reader sees it then), so the acknowledgements of a transaction's outputs
// are held until Commit succeeds, and dropped by Abort. It also times the
// commit path.
type ackTransactor struct {
	inner chain.Transactor
	log   *ackLog // nil: no latency run
	t     *txnTimer

	mu      sync.Mutex
	pending []source
}

func (a *ackTransactor) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	done = a.t.timeSend(done)
	if a.log == nil {
		a.inner.Produce(ctx, msgs, done)
		return
	}
	srcs := sourcesOf(msgs)
	a.inner.Produce(ctx, msgs, func(err error) {
		if err == nil && len(srcs) > 0 {
			a.mu.Lock()
			a.pending = append(a.pending, srcs...)
			a.mu.Unlock()
		}
		done(err)
	})
}

func (a *ackTransactor) AppendChangelog(ctx context.Context, topic string, partition int32, recs []chain.ChangelogRecord) (int64, error) {
	t0 := time.Now()
	a.t.cycleStart.CompareAndSwap(0, t0.UnixNano())
	end, err := a.inner.AppendChangelog(ctx, topic, partition, recs)
	a.t.appended(t0)
	return end, err
}

func (a *ackTransactor) Commit(ctx context.Context, offsets []chain.TxnOffset) error {
	t0 := time.Now()
	err := a.inner.Commit(ctx, offsets)
	d := time.Since(t0)
	start := a.t.cycleStart.Swap(0)
	if err != nil {
		return err
	}
	if start == 0 {
		start = t0.UnixNano()
	}
	a.t.paths.Add(1)
	a.t.pathNs.Add(time.Now().UnixNano() - start)
	a.t.commits.Add(1)
	a.t.commitNs.Add(int64(d))
	for {
		m := a.t.commitMax.Load()
		if int64(d) <= m || a.t.commitMax.CompareAndSwap(m, int64(d)) {
			break
		}
	}
	if a.log != nil {
		now := time.Now().UnixNano()
		a.mu.Lock()
		pending := a.pending
		a.pending = nil
		a.mu.Unlock()
		a.log.mu.Lock()
		for _, s := range pending {
			a.log.acks = append(a.log.acks, ack{src: s, at: now}) // no hand-off time: producePath skips it
		}
		a.log.mu.Unlock()
	}
	return nil
}

func (a *ackTransactor) Abort(ctx context.Context) error {
	a.t.aborts.Add(1)
	a.t.cycleStart.Store(0)
	a.mu.Lock()
	a.pending = nil
	a.mu.Unlock()
	return a.inner.Abort(ctx)
}

// timedChangelog times the changelog's appends of an at-least-once run
// (an exactly-once run appends through the Transactor).
type timedChangelog struct {
	chain.Changelog
	t *txnTimer
}

func (c timedChangelog) Partition(topic string, partition int32) (chain.ChangelogPartition, error) {
	p, err := c.Changelog.Partition(topic, partition)
	if err != nil {
		return nil, err
	}
	return timedChangelogPartition{p, c.t}, nil
}

// TombstoneRetention keeps the wrapped changelog's (chain.TombstoneRetention).
func (c timedChangelog) TombstoneRetention() time.Duration {
	if r, ok := c.Changelog.(chain.TombstoneRetention); ok {
		return r.TombstoneRetention()
	}
	return 0
}

type timedChangelogPartition struct {
	chain.ChangelogPartition
	t *txnTimer
}

func (p timedChangelogPartition) Append(ctx context.Context, recs []chain.ChangelogRecord) (int64, error) {
	t0 := time.Now()
	end, err := p.ChangelogPartition.Append(ctx, recs)
	p.t.appended(t0)
	return end, err
}

// targets checks the exactly-once cost bar on the table: exactly-once costs at most
// CostTarget of at-least-once throughput at TargetInterval (a row at
// another interval is not checked), both runs in steady state.
func (c *CostResult) targets(workload string) []Target {
	var ts []Target
	for i := range c.Rows {
		r := &c.Rows[i]
		if r.Cost == nil || r.CommitInterval != TargetInterval.String() {
			continue
		}
		t := Target{Name: fmt.Sprintf("%s: exactly-once cost, 1 − exactly-once ÷ at-least-once throughput, commit interval %s ≤", workload, r.CommitInterval),
			Want: CostTarget, Got: *r.Cost, AtMost: true}
		steady := r.cell(GuaranteeAtLeastOnce).Run.Steady && r.cell(GuaranteeExactlyOnce).Run.Steady
		t.Met = *r.Cost <= CostTarget && steady
		if *r.Cost <= CostTarget && !steady {
			t.Why = "a run was not steady state (shorter than 12.5 commit intervals, or fewer than 10 checkpoints on the busiest partition or 10 commits)"
		}
		ts = append(ts, t)
	}
	return ts
}

// writeCost prints the exactly-once cost table: each cell's runs in
// detail, then one markdown table of every workload (README "Delivery
// guarantees" takes it as printed).
func (r *Report) writeCost(b *strings.Builder) {
	fmt.Fprintf(b, "exactly-once cost table: guarantees %v at commit intervals %s; the chain with Pebble state and a changelog in both (as `differential run`)\n",
		r.Guarantees, r.CommitIntervals)
	fmt.Fprintf(b, "every throughput run lasts ≥ max(%.2fs, 12.5 commit intervals) and holds ≥ %[2]d checkpoints and %[2]d commits; latency runs at %.0f%% of the row's slower cell, for max(latency duration, 3 intervals); idle release %s\n",
		r.Duration.Seconds(), r.steadyCheckpoints(), 100*r.LatencyLoad, r.IdleTimeout)
	b.WriteString("exactly-once latency: input handed to the producer → the transaction holding its output committed (visible to read_committed); at-least-once: → output acknowledged\n")
	for i := range r.Workloads {
		wr := &r.Workloads[i]
		c := wr.EOSCost
		if c == nil {
			continue
		}
		fmt.Fprintf(b, "\nworkload %s: %d partitions, W=%d, gate %s\n", wr.Workload, wr.Partitions, wr.Workers, c.Gate)
		fmt.Fprintf(b, "  stream: %s\n", wr.Params)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  interval\tguarantee\trecords\trec/s\telapsed\tsteady\tckpt busiest\tcommits\tcpu s\tW busy (all idle)\tcorrect\tp50 ms\tp99 ms\tlatency correct\tchangelog appends; transactions (commit path: first append → EndTxn done)\n")
		for _, row := range c.Rows {
			for _, cell := range row.Cells {
				d := cell.Run
				p50, p99, lc := "-", "-", "-"
				if l := cell.Latency; l != nil {
					p50, p99, lc = optf(l.P50ms, "%.1f"), optf(l.P99ms, "%.1f"), correctText(l.Correctness)
				}
				path := "-"
				if t := cell.Txn; t != nil {
					path = fmt.Sprintf("send→ack %.1fms; %d appends %.1fms", t.SendMeanMs, t.Appends, t.AppendMeanMs)
					if t.Commits > 0 || t.Aborts > 0 {
						path += fmt.Sprintf("; %d txns: commit %.1fms (max %.1fms), path %.1fms = %.0f%% of the window; %d aborts",
							t.Commits, t.CommitMeanMs, t.CommitMaxMs, t.PathMeanMs, 100*t.PathFraction, t.Aborts)
					}
				}
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%.0f\t%.2fs\t%v\t%d\t%d\t%.1f\t%.0f%% (%.0f%%)\t%s\t%s\t%s\t%s\t%s\n", row.CommitInterval, cell.Guarantee, d.Records, d.ThroughputRPS,
					d.Elapsed, d.Steady, d.CheckpointsMost, d.Commits, d.CPUs, 100*d.SlotUse, 100*d.SlotsIdle, correctText(d.Correctness), p50, p99, lc, path)
			}
		}
		tw.Flush()
	}
	b.WriteString("\n| workload | commit interval | at-least-once rec/s | at-least-once p99 | exactly-once rec/s | exactly-once p99 | cost (1 − eos ÷ alo) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for i := range r.Workloads {
		wr := &r.Workloads[i]
		if wr.EOSCost == nil {
			continue
		}
		for _, row := range wr.EOSCost.Rows {
			fmt.Fprintf(b, "| %s (%s gate) | %s |", wr.Workload, wr.EOSCost.Gate, row.CommitInterval)
			for _, g := range Guarantees {
				c := row.cell(g)
				if c == nil {
					b.WriteString(" - | - |")
					continue
				}
				p99 := "-"
				if c.Latency != nil && c.Latency.P99ms != nil {
					p99 = fmtMs(*c.Latency.P99ms)
				}
				fmt.Fprintf(b, " %s | %s |", thousands(c.Run.ThroughputRPS), p99)
			}
			fmt.Fprintf(b, " %s |\n", optPct(row.Cost))
		}
	}
}

func optPct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100**v)
}

func fmtMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// thousands formats a rate as an integer with comma separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
