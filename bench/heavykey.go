package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

// HeavyKeyOptions configures HeavyKey. Zero values take the defaults given.
type HeavyKeyOptions struct {
	// Records of the workload (default 1,000,000), over Partitions
	// partitions (default 8).
	Records    int
	Partitions int
	// Share is the heavy key's share of its partition's records
	// (workload.Config.HeavyKeyShare, default 0.3).
	Share float64
	// Seed of the workload (default 1).
	Seed uint64
	// CommitEvery is the number of records between two checkpoints of
	// every partition (default 10,000: about what the chain persists per
	// second at this rate).
	CommitEvery int
	// Dir is where the Pebble directory goes (default os.TempDir()).
	Dir string
	// NoVerify skips comparing the heavy partition's outputs and final
	// state with the reference model.
	NoVerify bool
	// Progress receives a line per 10% (default: discard).
	Progress io.Writer
}

func (o HeavyKeyOptions) withDefaults() HeavyKeyOptions {
	o.Records, o.Partitions, o.CommitEvery = cmp.Or(o.Records, 1_000_000), cmp.Or(o.Partitions, 8), cmp.Or(o.CommitEvery, 10_000)
	o.Share, o.Seed = cmp.Or(o.Share, 0.3), cmp.Or(o.Seed, 1)
	o.Progress = cmp.Or[io.Writer](o.Progress, io.Discard)
	return o
}

// Validate reports, once the defaults are applied, what HeavyKey would
// reject, naming each field by its flag of `differential heavykey`.
func (o HeavyKeyOptions) Validate() error { return o.withDefaults().validate() }

func (o HeavyKeyOptions) validate() error {
	switch {
	case o.Records < 1:
		return fmt.Errorf("--records must be >= 1, got %d", o.Records)
	case o.Partitions < 1:
		return fmt.Errorf("--partitions must be >= 1, got %d", o.Partitions)
	case o.Share <= 0 || o.Share >= 1:
		return fmt.Errorf("--share must be in (0, 1), got %v", o.Share)
	case o.CommitEvery < 1:
		return fmt.Errorf("--commit-every must be >= 1, got %d", o.CommitEvery)
	}
	return nil
}

// HeavyKeyClass is the cost of one class of records of one event type.
type HeavyKeyClass struct {
	Class string // "heavy key", "other keys, same partition", "other keys, other partitions"
	Type  string // click, install, purchase
	// Records counted (valid records of that type; duplicates included:
	// they cost their deduplication).
	Records int
	// Mean, P50 and P99 of the per-record CPU time, ns.
	MeanNS, P50NS, P99NS float64
}

// HeavyKeyReport is what HeavyKey measured.
type HeavyKeyReport struct {
	Options   HeavyKeyOptions
	Workload  string
	GoVersion string
	CPUs      int
	HeavyKey  string
	Partition int32
	// PartitionRecords and HeavyRecords: the heavy key's partition and the
	// heavy key's share of it.
	PartitionRecords, HeavyRecords int
	// HeavyInstalls and HeavyClicks: the heavy key's stored installs and
	// clicks usable half-way through the run (its history inside the
	// windows).
	HeavyInstalls, HeavyClicks int
	Classes                    []HeavyKeyClass
	// Ratio is, per type, the heavy key's mean per-record CPU over that of
	// the other keys of its partition.
	Ratio map[string]float64
	// RecordCPU is the CPU of all records' stage work (the per-record
	// times summed); CheckpointCPU that of the checkpoints (the store's
	// batch, eviction included); ProcessCPU the whole process's user+system
	// time over the run (Pebble's flushes and compactions included); Wall
	// the run's duration. Checkpoints counts them.
	RecordCPU, CheckpointCPU, ProcessCPU, Wall time.Duration
	Checkpoints                                int
	// Verified: the heavy partition's outputs and final state equal the
	// reference model's (false when NoVerify).
	Verified bool
}

// HeavyKey measures what a record costs the attribution processors with
// the Pebble store when one key has a large share of its partition and
// thousands of events inside the windows, against the records of other
// keys. It generates the workload (workload.DefaultConfig, the demo's and
// `differential produce`'s, with HeavyKeyShare), then runs every record
// through the three stages' Sequence and Process on one goroutine locked to
// its OS thread, in the workload's order, each partition's stages as the
// engine's gate (partition scope) lets them go: a follower takes a record
// once its leader is past it and, for a record it handles, its leader's
// watermark is past its time plus Lateness; at the end of the log the gate
// is released. The store is a store.DB in a fresh directory; every
// CommitEvery records every partition is checkpointed at its stages'
// positions with eviction at the slowest stage's watermark, as the chain
// does. A record's CPU time is the thread's CPU clock
// (CLOCK_THREAD_CPUTIME_ID) around its stage work, summed over its stages,
// less the clock's own cost. No broker is involved: this is the state's
// cost, which is what grows with a key's history.
func HeavyKey(ctx context.Context, opts HeavyKeyOptions) (*HeavyKeyReport, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Seed, wc.HeavyKeyShare = o.Records, o.Partitions, o.Seed, o.Share
	wc.MaxRecordBytes = maxRecordBytes
	fmt.Fprintf(o.Progress, "heavy key: generating %d records\n", o.Records)
	recs := workload.Generate(wc)
	rep := &HeavyKeyReport{Options: o, Workload: wc.String(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		HeavyKey: workload.HeavyKey, Partition: workload.Partition([]byte(workload.HeavyKey), int32(o.Partitions))}
	for _, r := range recs {
		if r.Partition == rep.Partition {
			rep.PartitionRecords++
			if string(r.Key) == workload.HeavyKey {
				rep.HeavyRecords++
			}
		}
	}

	dir, err := os.MkdirTemp(o.Dir, "differential-heavykey-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := store.OpenPebble(dir)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r := &heavyRun{o: o, cfg: attributionConfig(), rep: rep, db: db}
	if err := r.run(ctx, recs); err != nil {
		return rep, err
	}
	r.summarise(recs)
	if !o.NoVerify {
		fmt.Fprintf(o.Progress, "heavy key: verifying partition %d against the reference model\n", rep.Partition)
		if err := r.verify(recs); err != nil {
			return rep, err
		}
		rep.Verified = true
	}
	return rep, nil
}

const (
	classHeavy = iota
	classSamePartition
	classOther
)

var heavyClassNames = [3]string{"heavy key", "other keys, same partition", "other keys, other partitions"}

// heavyRun is one HeavyKey measurement.
type heavyRun struct {
	o      HeavyKeyOptions
	cfg    attribution.Config
	rep    *HeavyKeyReport
	db     *store.DB
	stages []chain.Stage
	parts  []*heavyPartition
	// cost[i]: the stage work of recs[i] so far, summed over its stages.
	cost     []time.Duration
	overhead time.Duration
	// outputs of the heavy partition, per stage (install 1, purchase 2), in
	// offset order.
	outputs [3][]reference.Output
}

// heavyPartition is one partition's log and its stages' positions, run
// under the partition-scope gate of DESIGN.md "The follower gate".
type heavyPartition struct {
	id int32
	ps chain.PartitionStore
	// evs[o] is the record at offset o (nil: invalid, dead-lettered by the
	// first stage and skipped by every stage); idx[o] its index in the
	// workload; stream[o] = S(o), with stream[len] the time after the last.
	evs    []*chain.Event
	idx    []int
	stream []time.Time
	next   [3]int64 // per stage
}

func (hp *heavyPartition) append(ev *chain.Event, i int) {
	s := time.Time{}
	if n := len(hp.stream); n > 0 {
		s = hp.stream[n-1]
	} else {
		hp.stream = append(hp.stream, s)
	}
	if ev != nil {
		s = maxT(s, ev.Time)
	}
	hp.evs, hp.idx = append(hp.evs, ev), append(hp.idx, i)
	hp.stream = append(hp.stream, s)
}

func (r *heavyRun) run(ctx context.Context, recs []workload.Record) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r.stages = attribution.Chain(r.cfg)
	names := make([]string, len(r.stages))
	for i, s := range r.stages {
		names[i] = s.Name
	}
	for p := range r.o.Partitions {
		ps, err := r.db.OpenPartition("events", int32(p), names)
		if err != nil {
			return err
		}
		ps.(chain.HistoryKeeper).KeepHistory(false) // as the attribution chain's
		defer ps.Close()
		r.parts = append(r.parts, &heavyPartition{id: int32(p), ps: ps})
	}
	r.cost = make([]time.Duration, len(recs))
	dec := attribution.Decoder(r.cfg)
	r.overhead = clockOverhead()
	cpu0, wall0 := cpuTime(), time.Now()
	var ckptCPU time.Duration
	for i := range recs {
		if i%max(len(recs)/10, 1) == 0 && i > 0 {
			fmt.Fprintf(r.o.Progress, "heavy key: %d/%d records\n", i, len(recs))
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if i == len(recs)/2 {
			if err := r.history(); err != nil {
				return err
			}
		}
		rec := &recs[i].Record
		hp := r.parts[rec.Partition]
		var ev *chain.Event
		if d, err := dec.Decode(rec); err == nil {
			ev = &chain.Event{Record: *rec, Decoded: d}
		}
		hp.append(ev, i)
		if err := r.pump(hp, false); err != nil {
			return err
		}
		if (i+1)%r.o.CommitEvery == 0 {
			start := threadCPU()
			if err := r.checkpoint(); err != nil {
				return err
			}
			ckptCPU += threadCPU() - start
			r.rep.Checkpoints++
		}
	}
	// The end of the log: the leaders are idle, which releases the gate.
	for _, hp := range r.parts {
		if err := r.pump(hp, true); err != nil {
			return err
		}
	}
	start := threadCPU()
	if err := r.checkpoint(); err != nil {
		return err
	}
	ckptCPU += threadCPU() - start
	r.rep.Checkpoints++
	r.rep.CheckpointCPU = ckptCPU
	r.rep.ProcessCPU, r.rep.Wall = cpuTime()-cpu0, time.Since(wall0)
	for _, c := range r.cost {
		r.rep.RecordCPU += c
	}
	return nil
}

// pump lets every stage of hp process what the gate allows: the first
// stage everything appended; stage k ≥ 1 the record at o with time t once
// its leader's position is past o and, for a record it handles, its
// leader's watermark S(next) > t + Lateness (idle: position only, and the
// record is processed as of the leader's position, Context.Horizon, as the
// chain's idle release does).
func (r *heavyRun) pump(hp *heavyPartition, idle bool) error {
	end := int64(len(hp.evs))
	for k := range r.stages {
		for hp.next[k] < end {
			o := hp.next[k]
			ev := hp.evs[o]
			var horizon int64 // none
			if k > 0 {
				lead := hp.next[k-1]
				if lead <= o {
					break
				}
				if ev != nil && r.stages[k].Filter(ev) && !hp.stream[lead].After(ev.Time.Add(r.cfg.Lateness)) {
					if !idle {
						break
					}
					horizon = lead
				}
			}
			if ev != nil {
				if err := r.process(hp, k, ev, horizon); err != nil {
					return err
				}
			}
			hp.next[k]++
		}
	}
	return nil
}

// process runs ev through stage k if it accepts it: Sequence, then Process
// unless it is a duplicate, timed on the thread's CPU clock; horizon is
// Context.Horizon (0: none).
func (r *heavyRun) process(hp *heavyPartition, k int, ev *chain.Event, horizon int64) error {
	s := r.stages[k]
	if !s.Filter(ev) {
		return nil
	}
	start := threadCPU()
	o := ev.Offset
	pc := chain.NewContext(chain.ContextOptions{Topic: "events", Partition: ev.Partition, Stage: s.Name,
		Offset: o, StreamTime: hp.stream[o], Horizon: horizon, EvictionWatermark: hp.stream[hp.next[len(r.stages)-1]], State: hp.ps.Stage(k)})
	skip, err := s.Processor.(chain.Sequencer).Sequence(pc, ev)
	if err != nil {
		return fmt.Errorf("%s sequence at %d/%d: %w", s.Name, ev.Partition, o, err)
	}
	if !skip {
		if err := s.Processor.Process(context.Background(), pc, ev); err != nil {
			return fmt.Errorf("%s process at %d/%d: %w", s.Name, ev.Partition, o, err)
		}
	}
	r.cost[hp.idx[o]] += threadCPU() - start - r.overhead
	if ev.Partition == r.rep.Partition {
		for _, m := range pc.Emitted() {
			r.outputs[k] = append(r.outputs[k], reference.Output{Partition: ev.Partition, Offset: o, Key: m.Key, Value: m.Value})
		}
	}
	return nil
}

// checkpoint persists every partition at its stages' positions and evicts
// what expired at the slowest stage's watermark, as the chain does
// (evictBefore = watermark − 1ns).
func (r *heavyRun) checkpoint() error {
	for _, hp := range r.parts {
		if len(hp.stream) == 0 {
			continue
		}
		cps := make([]commit.Checkpoint, len(r.stages))
		for i, s := range r.stages {
			cps[i] = commit.Checkpoint{Stage: s.Name, Next: hp.next[i], Watermark: hp.stream[hp.next[i]].UnixMilli()}
		}
		var evict time.Time
		if wm := hp.stream[hp.next[len(r.stages)-1]]; !wm.IsZero() {
			evict = wm.Add(-1)
		}
		if err := hp.ps.Checkpoint(cps, evict); err != nil {
			return err
		}
	}
	return nil
}

// history counts the heavy key's stored clicks and installs usable at its
// partition's current stream time (taken half-way through the run).
func (r *heavyRun) history() error {
	hp := r.parts[r.rep.Partition]
	if err := r.checkpoint(); err != nil {
		return err
	}
	snap, err := r.usable(hp.stream[len(hp.stream)-1])
	if err != nil {
		return err
	}
	r.rep.HeavyClicks, r.rep.HeavyInstalls = 0, 0
	for _, c := range snap.Clicks {
		if c.UserID == workload.HeavyKey {
			r.rep.HeavyClicks++
		}
	}
	for _, in := range snap.Installs {
		if in.UserID == workload.HeavyKey {
			r.rep.HeavyInstalls++
		}
	}
	return nil
}

func (r *heavyRun) summarise(recs []workload.Record) {
	var costs [3]map[string][]float64
	for c := range costs {
		costs[c] = map[string][]float64{}
	}
	for _, hp := range r.parts {
		for o, ev := range hp.evs {
			if ev == nil {
				continue
			}
			class := classOther
			switch {
			case string(ev.Key) == workload.HeavyKey:
				class = classHeavy
			case hp.id == r.rep.Partition:
				class = classSamePartition
			}
			costs[class][ev.Type] = append(costs[class][ev.Type], float64(r.cost[hp.idx[o]]))
		}
	}
	r.rep.Ratio = map[string]float64{}
	for _, typ := range []string{attribution.TypeClick, attribution.TypeInstall, attribution.TypePurchase} {
		var means [3]float64
		for c, byType := range costs {
			xs := byType[typ]
			if len(xs) == 0 {
				continue
			}
			slices.Sort(xs)
			var sum float64
			for _, x := range xs {
				sum += x
			}
			means[c] = sum / float64(len(xs))
			r.rep.Classes = append(r.rep.Classes, HeavyKeyClass{Class: heavyClassNames[c], Type: typ, Records: len(xs),
				MeanNS: means[c], P50NS: xs[len(xs)/2], P99NS: xs[len(xs)*99/100]})
		}
		if means[classSamePartition] > 0 {
			r.rep.Ratio[typ] = means[classHeavy] / means[classSamePartition]
		}
	}
}

// verify compares the heavy partition's outputs and final state with the
// reference model's.
func (r *heavyRun) verify(recs []workload.Record) error {
	var log []chain.Record
	for _, rec := range recs {
		if rec.Partition == r.rep.Partition {
			log = append(log, rec.Record)
		}
	}
	ref := reference.Run(log, r.cfg)
	for k, want := range [][]reference.Output{nil, ref.Installs, ref.Purchases} {
		got := r.outputs[k]
		if len(got) != len(want) {
			return fmt.Errorf("%w: heavy key run: stage %s has %d outputs, the reference %d", ErrIncorrect, r.stages[k].Name, len(got), len(want))
		}
		for i := range want {
			if got[i].Offset != want[i].Offset || !bytes.Equal(got[i].Value, want[i].Value) {
				return fmt.Errorf("%w: heavy key run: stage %s output %d: %s, reference %s", ErrIncorrect, r.stages[k].Name, i, got[i].Value, want[i].Value)
			}
		}
	}
	snap, err := r.usable(ref.StreamTime)
	if err != nil {
		return err
	}
	if got, want := snap.String(), ref.Final.String(); got != want {
		return fmt.Errorf("%w: heavy key run: the final state differs from the reference model's", ErrIncorrect)
	}
	return nil
}

// usable is the heavy partition's stored state usable at stream time at.
func (r *heavyRun) usable(at time.Time) (attribution.Snapshot, error) {
	entries, err := r.db.Entries("events", r.rep.Partition)
	if err != nil {
		return attribution.Snapshot{}, err
	}
	snap, err := attribution.SnapshotOf(entries)
	if err != nil {
		return attribution.Snapshot{}, err
	}
	return reference.Usable(snap, at, r.cfg), nil
}

// WriteTable writes the report as text tables.
func (rep *HeavyKeyReport) WriteTable(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Heavy key %q: %d of the %d records of partition %d (%.0f%%); half-way through, %d installs and %d clicks of it are inside the windows\n",
		rep.HeavyKey, rep.HeavyRecords, rep.PartitionRecords, rep.Partition,
		100*float64(rep.HeavyRecords)/float64(max(rep.PartitionRecords, 1)), rep.HeavyInstalls, rep.HeavyClicks)
	fmt.Fprintf(&b, "workload: %s\n%s, %d CPUs; Pebble store, checkpoint every %d records\n\n", rep.Workload, rep.GoVersion, rep.CPUs, rep.Options.CommitEvery)
	fmt.Fprintf(&b, "| type | records of | records | mean µs | p50 µs | p99 µs |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range rep.Classes {
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %.1f | %.1f |\n", c.Type, c.Class, c.Records, c.MeanNS/1e3, c.P50NS/1e3, c.P99NS/1e3)
	}
	fmt.Fprintf(&b, "\nheavy key ÷ other keys of its partition (mean): click %.2f×, install %.2f×, purchase %.2f×\n",
		rep.Ratio[attribution.TypeClick], rep.Ratio[attribution.TypeInstall], rep.Ratio[attribution.TypePurchase])
	records := float64(rep.Options.Records)
	fmt.Fprintf(&b, "per record overall: stage work %.1f µs, checkpoints %.1f µs (%d), process CPU %.1f µs (Pebble's background work included); wall %s\n",
		float64(rep.RecordCPU.Microseconds())/records, float64(rep.CheckpointCPU.Microseconds())/records, rep.Checkpoints,
		float64(rep.ProcessCPU.Microseconds())/records, rep.Wall.Round(time.Millisecond))
	switch {
	case rep.Verified:
		fmt.Fprintf(&b, "verified: partition %d's outputs and final state equal the reference model's\n", rep.Partition)
	default:
		fmt.Fprintf(&b, "not verified (NoVerify)\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// clockOverhead is the cost of one threadCPU reading, subtracted from each
// record's time.
func clockOverhead() time.Duration {
	const n = 2000
	start := threadCPU()
	for range n {
		threadCPU()
	}
	return (threadCPU() - start) / n
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
