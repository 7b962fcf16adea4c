package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// B's CPU floor: the CPU per input record of the work every design of
// workload B must do, each part on its own, with none of an engine's
// coordination. B has no simulated costs, so a design's throughput is
// bounded by its CPU: on c cores no design runs faster than c ÷ (the sum
// of the parts' CPU per record). The parts:
//
//   - consume: a plain sarama consumer group reading the input with the
//     base configuration both designs' consumers use (rawConsumer), from
//     its first record to its last (not the group join: a fixed cost that
//     a pass of a fraction of a second would otherwise be mostly made of);
//   - decode: the attribution decoder over every record, in memory;
//   - process: the three stages' processors on one goroutine over an
//     in-memory store, one stage after another over each partition's
//     records in offset order (Sequence, then Process) — no gate, no
//     dispatch, no checkpoint, no eviction;
//   - produce: the outputs and dead letters of that pass, handed to a
//     kafka.Producer on its own client, every one acknowledged.
//
// Each part is the process's CPU (user + system) over its pass ÷ the
// input's records: garbage collection is counted, and with the embedded
// broker so is the broker's work serving the consumer's fetches and the
// producer's requests — as it is in every design's CPU on the same
// broker. With a real cluster the broker's work is not in any figure.

// CPUFloor is B's CPU floor on one input and what it bounds.
type CPUFloor struct {
	Records int `json:"records"`
	// Passes is how many times each part was measured; each part's figure
	// is its median pass.
	Passes int `json:"passes"`
	// ConsumeUs, DecodeUs, ProcessUs and ProduceUs are each part's CPU per
	// input record (µs); FloorUs their sum.
	ConsumeUs float64 `json:"consume_us"`
	DecodeUs  float64 `json:"decode_us"`
	ProcessUs float64 `json:"process_us"`
	ProduceUs float64 `json:"produce_us"`
	FloorUs   float64 `json:"floor_us"`
	// Outputs and DeadLetters are what the process pass emitted and the
	// produce pass had acknowledged.
	Outputs     int `json:"outputs"`
	DeadLetters int `json:"dead_letters"`
	// Cores is GOMAXPROCS during the passes; BoundRPS = Cores ÷ FloorUs
	// records/s: the most any design could reach on these cores if it did
	// nothing but the floor's work and kept every core busy.
	Cores    int     `json:"cores"`
	BoundRPS float64 `json:"bound_rps"`
	// EmbeddedBroker: the broker ran in this process, and its work serving
	// the consume and produce passes is in their CPU.
	EmbeddedBroker bool `json:"embedded_broker"`
}

// floorParts is one pass of each part: CPU per input record.
type floorParts struct {
	consume, decode, process, produce time.Duration
	outputs, deadLetters              int
}

// newCPUFloor sums the parts (each the median of its passes) into the
// floor and the bound on cores.
func newCPUFloor(records, cores int, passes []floorParts) *CPUFloor {
	med := func(get func(floorParts) time.Duration) float64 {
		xs := make([]float64, len(passes))
		for i, p := range passes {
			xs[i] = float64(get(p)) / float64(time.Microsecond)
		}
		return *medianOf(xs)
	}
	f := &CPUFloor{
		Records: records, Passes: len(passes), Cores: cores,
		ConsumeUs: med(func(p floorParts) time.Duration { return p.consume }),
		DecodeUs:  med(func(p floorParts) time.Duration { return p.decode }),
		ProcessUs: med(func(p floorParts) time.Duration { return p.process }),
		ProduceUs: med(func(p floorParts) time.Duration { return p.produce }),
	}
	if len(passes) > 0 {
		f.Outputs, f.DeadLetters = passes[0].outputs, passes[0].deadLetters
	}
	f.FloorUs = f.ConsumeUs + f.DecodeUs + f.ProcessUs + f.ProduceUs
	if f.FloorUs > 0 {
		f.BoundRPS = float64(cores) / (f.FloorUs / 1e6)
	}
	return f
}

// share is FloorUs ÷ d's CPU per input record, for the rows the floor
// applies to (see fraction); nil without a floor.
func (f *CPUFloor) share(d *DesignResult) *float64 {
	if f.fraction(d) == nil || cpuPerRecordUs(d) <= 0 {
		return nil
	}
	return ratio(f.FloorUs, cpuPerRecordUs(d))
}

// floorPasses is how many times each part is measured (the median is
// reported): a neighbour's burst moves one pass, not the median of three.
const floorPasses = 3

// cpuFloor measures B's CPU floor on in, passes times, at the current
// GOMAXPROCS.
func (h *harness) cpuFloor(ctx context.Context, pt point, in *input, passes int) (*CPUFloor, error) {
	var ps []floorParts
	for range passes {
		p, err := h.floorPass(ctx, pt, in)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	f := newCPUFloor(in.n, runtime.GOMAXPROCS(0), ps)
	f.EmbeddedBroker = len(h.o.Brokers) == 0
	h.progressf("  cpu floor (%d records, median of %d passes): consume %.2f + decode %.2f + process %.2f + produce %.2f = %.2f µs/record; bound on %d cores %.0f rec/s (%d outputs, %d dead letters)",
		f.Records, f.Passes, f.ConsumeUs, f.DecodeUs, f.ProcessUs, f.ProduceUs, f.FloorUs, f.Cores, f.BoundRPS, f.Outputs, f.DeadLetters)
	return f, nil
}

// floorPass measures each part once, in order: consume, decode, process,
// produce (each feeds the next: the decoded events, the emitted messages).
func (h *harness) floorPass(ctx context.Context, pt point, in *input) (floorParts, error) {
	var p floorParts
	n := time.Duration(in.n)
	raw, err := h.measure(ctx, runSpec{kind: kindRaw, pt: pt, topic: in.topic, ends: in.ends})
	if err != nil {
		return p, fmt.Errorf("bench: cpu floor: consume: %w", err)
	}
	if raw.windowCPU <= 0 {
		return p, errors.New("bench: cpu floor: consume: no record consumed")
	}
	p.consume = raw.windowCPU / n

	dec := attribution.Decoder(h.cfg)
	c0 := cpuTime()
	evs := decodeAll(dec, in)
	p.decode = (cpuTime() - c0) / n

	c0 = cpuTime()
	out, err := processAll(ctx, h.cfg, in.topic, h.o.IdleTimeout, evs)
	if err != nil {
		return p, fmt.Errorf("bench: cpu floor: process: %w", err)
	}
	p.process = (cpuTime() - c0) / n
	p.outputs, p.deadLetters = out.outputs, out.deadLetters

	outTopic, err := h.c.createTopic("floor-out", pt.wc.Partitions)
	if err != nil {
		return p, err
	}
	dlqTopic, err := h.c.createTopic("floor-dlq", 1)
	if err != nil {
		h.c.deleteTopics(outTopic)
		return p, err
	}
	cpu, err := h.produceAll(ctx, out, outTopic, dlqTopic)
	h.c.deleteTopics(outTopic, dlqTopic)
	if err != nil {
		return p, fmt.Errorf("bench: cpu floor: produce: %w", err)
	}
	p.produce = cpu / n
	return p, nil
}

// decodeAll decodes every record of in, by partition in offset order, as
// the designs' consumers hand them over.
func decodeAll(dec chain.Decoder, in *input) [][]chain.Event {
	evs := make([][]chain.Event, len(in.ends))
	for p, n := range in.ends {
		evs[p] = make([]chain.Event, 0, n)
	}
	for i := range in.recs {
		r := &in.recs[i].Record
		ev := chain.Event{Record: *r}
		ev.Topic = in.topic
		ev.Decoded, ev.Err = dec.Decode(&ev.Record)
		evs[r.Partition] = append(evs[r.Partition], ev)
	}
	return evs
}

// floorOutput is what the process pass emitted: per processed record its
// outputs (the unit a design hands to its producer), and the dead letters.
// Messages without a topic go to the output topic.
type floorOutput struct {
	batches              [][]chain.Message
	dead                 []chain.Message
	outputs, deadLetters int
}

// processAll runs the attribution stages over evs (per partition, in
// offset order) on this goroutine over a fresh in-memory store: per
// partition, each stage in chain order over all its records — so that
// every leader write a follower may read is in place, as the gate
// guarantees the engine — Sequence then Process, with the stream time
// before each record and the Horizon the engine gives it (idle: the idle
// timeout; the log's end counts as confirmed), so that the outputs are the
// engine's. No gate, no dispatch, no checkpoint.
func processAll(ctx context.Context, cfg attribution.Config, topic string, idle time.Duration, evs [][]chain.Event) (*floorOutput, error) {
	mem := store.NewMemory()
	defer func() { _ = mem.Close() }()
	stages := attribution.Chain(cfg)
	names := make([]string, len(stages))
	for i, s := range stages {
		names[i] = s.Name
	}
	out := &floorOutput{}
	for p, pevs := range evs {
		ps, err := mem.OpenPartition(topic, int32(p), names)
		if err != nil {
			return nil, fmt.Errorf("open partition %d: %w", p, err)
		}
		ps.(chain.HistoryKeeper).KeepHistory(false) // as the attribution chain's
		// before[i]: S(o) of the record, the stream time below it.
		before := make([]time.Time, len(pevs))
		var stream time.Time
		for i := range pevs {
			before[i] = stream
			if ev := &pevs[i]; ev.Err == nil && ev.Time.After(stream) {
				stream = ev.Time
			}
		}
		horizon := idleHorizons(pevs, idle)
		for i := range pevs {
			if ev := &pevs[i]; ev.Err != nil {
				out.dead = append(out.dead, chain.DeadLetter("", names[0], &ev.Record, ev.Err, chain.DefaultMaxDeadLetterBytes))
			}
		}
		for k, s := range stages {
			seq, _ := s.Processor.(chain.Sequencer)
			for i := range pevs {
				ev := &pevs[i]
				if ev.Err != nil || (s.Filter != nil && !s.Filter(ev)) {
					continue
				}
				o := chain.ContextOptions{Topic: topic, Partition: int32(p), Stage: names[k], Offset: ev.Offset,
					StreamTime: before[i], State: ps.Stage(k)}
				if k > 0 {
					o.Horizon = horizon[i]
				}
				pc := chain.NewContext(o)
				if seq != nil {
					skip, err := seq.Sequence(pc, ev)
					if err != nil && chain.IsFatal(err) {
						return nil, fmt.Errorf("%s at %d/%d: %w", names[k], p, ev.Offset, err)
					}
					if err != nil {
						out.dead = append(out.dead, chain.DeadLetter("", names[k], &ev.Record, err, chain.DefaultMaxDeadLetterBytes))
						continue
					}
					if skip {
						continue
					}
				}
				if err := s.Processor.Process(ctx, pc, ev); err != nil {
					if chain.IsFatal(err) || ctx.Err() != nil {
						return nil, fmt.Errorf("%s at %d/%d: %w", names[k], p, ev.Offset, err)
					}
					out.dead = append(out.dead, chain.DeadLetter("", names[k], &ev.Record, err, chain.DefaultMaxDeadLetterBytes))
					continue
				}
				if msgs := pc.Emitted(); len(msgs) > 0 {
					out.batches = append(out.batches, slices.Clone(msgs))
					out.outputs += len(msgs)
				}
			}
		}
		if err := ps.Close(); err != nil {
			return nil, fmt.Errorf("close partition %d: %w", p, err)
		}
	}
	out.deadLetters = len(out.dead)
	return out, nil
}

// idleHorizons is chain.Context.Horizon of every record of one
// partition's whole log at a follower: 1 + the offset of the first record
// at or after it whose next record's Kafka timestamp is more than idle
// after its own, or the log's end (its last record, the end confirmed).
func idleHorizons(evs []chain.Event, idle time.Duration) []int64 {
	h := make([]int64, len(evs))
	if len(evs) == 0 {
		return h
	}
	next := evs[len(evs)-1].Offset + 1
	for i := len(evs) - 1; i >= 0; i-- {
		if i+1 < len(evs) && evs[i+1].Timestamp.Sub(evs[i].Timestamp) > idle {
			next = evs[i].Offset + 1
		}
		h[i] = next
	}
	return h
}

// produceAll hands out's messages to a kafka.Producer on its own client,
// the outputs to outTopic and the dead letters to dlqTopic, one Produce
// call per processed record as the designs make them, and waits for every
// acknowledgement. It returns the process's CPU from the first Produce
// call to the last acknowledgement.
func (h *harness) produceAll(ctx context.Context, out *floorOutput, outTopic, dlqTopic string) (time.Duration, error) {
	cfg := *h.c.Config()
	cfg.ClientID = "differential-bench-floor"
	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: h.c.Addrs(), Sarama: &cfg, Logger: h.o.Logger})
	if err != nil {
		return 0, err
	}
	defer func() { _ = prod.Close() }()
	for _, b := range out.batches {
		for j := range b {
			if b[j].Topic == "" {
				b[j].Topic = outTopic
			}
		}
	}
	for j := range out.dead {
		out.dead[j].Topic = dlqTopic
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	done := func(err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		wg.Done()
	}
	c0 := cpuTime()
	for _, b := range out.batches {
		wg.Add(1)
		prod.Produce(ctx, b, done)
	}
	for _, m := range out.dead {
		wg.Add(1)
		chain.ProduceDeadLetter(ctx, prod, m, done)
	}
	wg.Wait()
	cpu := cpuTime() - c0
	return cpu, first
}

// floorInput is the input the floor is measured on: the chain's own when it
// ran (its fractions of the bound are then of the same records), else
// Records or the ceilings' length (a tenth with Quick), no longer than the
// stream.
func (pr *pointRun) floorInput(wr *WorkloadResult) (*input, error) {
	if wr.Chain != nil {
		return pr.input(wr.Chain.Records)
	}
	o := pr.h.o
	n := ceilingRecords
	switch {
	case o.Records > 0:
		n = o.Records
	case o.Quick:
		n = ceilingRecords / 10
	}
	return pr.input(min(n, len(pr.st.recs)))
}

// floorAndCores measures the point's CPU floor, the designs' fractions of
// its bound and, with Options.Cores, the cores sweep. Without a design
// comparison (FloorOnly) the sweep's micro-batch batch size is chosen by
// the strongest micro-batch's sweep, run first at the machine's
// GOMAXPROCS as the comparison would.
func (h *harness) floorAndCores(ctx context.Context, pr *pointRun, wr *WorkloadResult) error {
	in, err := pr.floorInput(wr)
	if err != nil {
		return err
	}
	passes := floorPasses
	if h.o.Quick {
		passes = 1
	}
	if wr.Floor, err = h.cpuFloor(ctx, pr.pt, in, passes); err != nil {
		return err
	}
	if len(h.o.Cores) == 0 {
		return nil
	}
	hint := chainGuess(pr.pt)
	if wr.Chain != nil {
		hint = wr.Chain.ThroughputRPS
	}
	strong := wr.Strongest
	if strong == nil {
		sweep, best, err := h.sweep(ctx, pr, hint)
		wr.Sweep = sweep
		if err != nil {
			return err
		}
		strong = best
	}
	wr.Cores, err = h.coresSweep(ctx, pr, strong.BatchSize, hint, wr.Floor)
	return err
}

// fraction is d's throughput ÷ the bound, for the rows the bound applies
// to (the chain, both micro-batches: the designs doing the floor's work);
// nil without a floor.
func (f *CPUFloor) fraction(d *DesignResult) *float64 {
	if f == nil || d == nil || f.BoundRPS <= 0 {
		return nil
	}
	switch kind(d.Design) {
	case kindChain, kindStrongest, kindDesign6, kindPolling:
		return ratio(d.ThroughputRPS, f.BoundRPS)
	}
	return nil
}

// write prints the floor's parts and bound, and the fractions of it of
// the designs measured with it (the chain, the strongest micro-batch,
// the micro-batch baseline; any of them nil).
func (f *CPUFloor) write(b *strings.Builder, designs ...*DesignResult) {
	if f == nil {
		return
	}
	broker := "the broker's work not included"
	if f.EmbeddedBroker {
		broker = "the embedded broker's part included"
	}
	fmt.Fprintf(b, "  CPU floor on this machine (%d records, median of %d passes; process CPU ÷ input records, %s; consume from its first record, not the group join):\n", f.Records, f.Passes, broker)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "    consume: a plain consumer group over the input, same base client settings\t%6.2f µs\n", f.ConsumeUs)
	fmt.Fprintf(tw, "    decode: the attribution decoder\t%6.2f µs\n", f.DecodeUs)
	fmt.Fprintf(tw, "    process: the three stages on one goroutine, in-memory state, no gate, dispatch or checkpoint\t%6.2f µs\n", f.ProcessUs)
	fmt.Fprintf(tw, "    produce: %d outputs and %d dead letters on a producer of its own, acknowledged\t%6.2f µs\n", f.Outputs, f.DeadLetters, f.ProduceUs)
	fmt.Fprintf(tw, "    floor\t%6.2f µs\n", f.FloorUs)
	tw.Flush()
	fmt.Fprintf(b, "  CPU bound: %d cores (GOMAXPROCS) ÷ floor = %.0f records/s", f.Cores, f.BoundRPS)
	for _, d := range designs {
		if v := f.fraction(d); v != nil {
			fmt.Fprintf(b, "; %s at %.2f of it (floor ÷ its cpu per record %s)", designLabel(d), *v, optf(f.share(d), "%.2f"))
		}
	}
	b.WriteString("\n")
}

// writeCores prints the cores sweep.
func writeCores(b *strings.Builder, pts []CoresPoint, floor *CPUFloor) {
	if len(pts) == 0 {
		return
	}
	where := "the embedded broker held to the same cores"
	if floor != nil && !floor.EmbeddedBroker {
		where = "the brokers, in their own processes, keep theirs"
	}
	fmt.Fprintf(b, "  cores sweep (GOMAXPROCS per run, in this process: %s):\n", where)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "    cores\tdesign\trecords\trec/s\tcpu µs/rec\tspeed-up\tof cpu bound\tfloor ÷ cpu\tsteady\tcorrect\t")
	for _, p := range pts {
		for _, r := range []struct {
			d           *DesignResult
			up, ofBound *float64
		}{{p.Chain, p.ChainSpeedup, p.ChainOfBound}, {p.Strongest, p.StrongestSpeedup, p.StrongestOfBound}} {
			if r.d == nil {
				continue
			}
			steady := "yes"
			if !r.d.Steady {
				steady = "no"
			}
			fmt.Fprintf(tw, "    %d\t%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", p.Cores, designLabel(r.d), r.d.Records, r.d.ThroughputRPS,
				cpuPerRecordUs(r.d), optf(r.up, "%.2f×"), optf(r.ofBound, "%.2f"), optf(floor.share(r.d), "%.2f"), steady, correctText(r.d.Correctness))
		}
	}
	tw.Flush()
	if floor != nil {
		fmt.Fprintf(b, "    of cpu bound: rec/s ÷ (cores ÷ the %.2f µs floor measured at GOMAXPROCS %d)\n", floor.FloorUs, floor.Cores)
	}
}
