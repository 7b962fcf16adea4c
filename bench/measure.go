package bench

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// progress tracks, per input partition, the offset below which every record
// is complete in a design: processed (or skipped) by every stage with its
// outputs acknowledged by Kafka. It is fed by the chain's Observer (last
// stage's position) and by the micro-batch loop (after a batch's acks).
// Safe for concurrent use.
type progress struct {
	ends  []int64 // record count per partition
	next  []atomic.Int64
	left  atomic.Int64 // partitions not yet complete
	done  chan struct{}
	first atomic.Int64 // unix ns of the first record consumed (decoded)
	// firstCPU is the process's CPU (ns) when the first record was
	// consumed: the start of the measured window's CPU (windowCPU).
	firstCPU atomic.Int64
	last     atomic.Int64 // unix ns when the last partition completed

	// committed is, per partition, the highest offset a chain committed
	// (Observer.Committed); cdone closes once every partition with records
	// has committed its end (chain designs only: see chainObserver).
	committed []atomic.Int64
	cleft     atomic.Int64
	cdone     chan struct{}
}

func newProgress(ends []int64) *progress {
	p := &progress{ends: ends, next: make([]atomic.Int64, len(ends)), done: make(chan struct{}),
		committed: make([]atomic.Int64, len(ends)), cdone: make(chan struct{})}
	left := int64(0)
	for _, e := range ends {
		if e > 0 {
			left++
		}
	}
	p.left.Store(left)
	p.cleft.Store(left)
	if left == 0 {
		close(p.done)
		close(p.cdone)
	}
	return p
}

// commit notes that a chain committed partition part up to off.
func (p *progress) commit(part int32, off int64) {
	if int(part) >= len(p.committed) {
		return
	}
	if raise(&p.committed[part], off, p.ends[part], &p.cleft) {
		close(p.cdone)
	}
}

// consumed notes that a record was consumed (the first call starts the clock).
func (p *progress) consumed() {
	if p.first.Load() == 0 && p.first.CompareAndSwap(0, time.Now().UnixNano()) {
		p.firstCPU.Store(int64(cpuTime()))
	}
}

// advance notes that every record of partition part below next is complete.
func (p *progress) advance(part int32, next int64) {
	if int(part) >= len(p.next) {
		return
	}
	if raise(&p.next[part], next, p.ends[part], &p.left) {
		p.last.Store(time.Now().UnixNano())
		close(p.done)
	}
}

// raise raises *n to to if that is higher, and reports whether this call
// took it to end or past, making *left (the partitions below their ends)
// zero.
func raise(n *atomic.Int64, to, end int64, left *atomic.Int64) bool {
	for {
		old := n.Load()
		if to <= old {
			return false
		}
		if n.CompareAndSwap(old, to) {
			return old < end && to >= end && left.Add(-1) == 0
		}
	}
}

// reached waits until n records are complete (or ctx ends).
func (p *progress) reached(ctx context.Context, n int64) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for p.completed() < n {
		select {
		case <-t.C:
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// completed is the number of complete records.
func (p *progress) completed() int64 {
	var n int64
	for i := range p.next {
		n += min(p.next[i].Load(), p.ends[i])
	}
	return n
}

func (p *progress) total() int64 {
	var n int64
	for _, e := range p.ends {
		n += e
	}
	return n
}

// elapsed is the measured duration: first record consumed to last record complete.
func (p *progress) elapsed() time.Duration {
	f, l := p.first.Load(), p.last.Load()
	if f == 0 || l == 0 {
		return 0
	}
	return time.Duration(l - f)
}

// chainObserver feeds progress from the chain's last stage, and logs
// commits (ev may be nil).
type chainObserver struct {
	p    *progress
	last int
	ev   *events
}

func (o chainObserver) Begin(chain.BeginInfo) {}

func (o chainObserver) Advanced(_ string, partition int32, stage int, next int64, _ time.Time) {
	if stage == o.last {
		o.p.advance(partition, next)
	}
}

func (o chainObserver) Committed(_ string, partition int32, offset int64, _ string) {
	o.p.commit(partition, offset)
	if o.ev != nil {
		o.ev.committed()
	}
}

// sampler records the peak heap every 20ms.
type sampler struct {
	stop      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
	peakLive  uint64 // heap marked live by the last GC
	peakAlloc uint64 // heap objects, garbage not yet swept included
}

func heapBytes() (live, alloc uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		alloc = s[1].Value.Uint64()
	}
	return live, alloc
}

func startSampler() *sampler {
	runtime.GC()
	s := &sampler{stop: make(chan struct{})}
	s.wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			s.take()
			select {
			case <-s.stop:
				s.take()
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *sampler) take() {
	live, alloc := heapBytes()
	s.peakLive, s.peakAlloc = max(s.peakLive, live), max(s.peakAlloc, alloc)
}

// finish stops the sampler (idempotent).
func (s *sampler) finish() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// source is the input record an output came from.
type source struct {
	partition int32
	offset    int64
}

// sourceOf reads the attribution SourceHeader.
func sourceOf(hs []chain.Header) (source, bool) {
	for _, h := range hs {
		if string(h.Key) == attribution.SourceHeader {
			p, o, err := attribution.ParseSource(h.Value)
			return source{p, o}, err == nil
		}
	}
	return source{}, false
}

// sourcesOf is the sources of msgs that carry one.
func sourcesOf(msgs []chain.Message) []source {
	srcs := make([]source, 0, len(msgs))
	for i := range msgs {
		if s, ok := sourceOf(msgs[i].Headers); ok {
			srcs = append(srcs, s)
		}
	}
	return srcs
}

// ack is one output's acknowledgement.
type ack struct {
	src source
	at  int64 // unix ns
	// called is when the design handed the output to the producer (unix
	// ns): at − called is the produce path (linger, request, broker ack).
	called int64
}

// ackLog collects the acknowledgement time of every output.
type ackLog struct {
	mu   sync.Mutex
	acks []ack
}

// ackProducer wraps the designs' producer (kafka.NewProducer): when log is
// set, it records when Kafka acknowledged each output, by the output's
// source header. Both designs use it, so latency is measured the same way.
type ackProducer struct {
	inner chain.Producer
	log   *ackLog
	t     *txnTimer // the cost table's runs: times each send's acknowledgement
}

func (a *ackProducer) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	done = a.t.timeSend(done)
	if a.log == nil {
		a.inner.Produce(ctx, msgs, done)
		return
	}
	called := time.Now().UnixNano()
	srcs := sourcesOf(msgs)
	a.inner.Produce(ctx, msgs, func(err error) {
		if err == nil && len(srcs) > 0 {
			now := time.Now().UnixNano()
			a.log.mu.Lock()
			for _, s := range srcs {
				a.log.acks = append(a.log.acks, ack{s, now, called})
			}
			a.log.mu.Unlock()
		}
		done(err)
	})
}

// latencies returns, for every acknowledged output of an input sent in
// [from, to] (unix ns), ack time − the time its input record was sent
// (feeder.sentAt), sorted.
func latencies(acks []ack, f *feeder, from, to int64) []time.Duration {
	out := make([]time.Duration, 0, len(acks))
	for _, a := range acks {
		if int(a.src.partition) >= len(f.sentAt) || a.src.offset >= int64(len(f.sentAt[a.src.partition])) {
			continue
		}
		sent := f.sentAt[a.src.partition][a.src.offset].Load()
		if sent < from || sent > to {
			continue
		}
		out = append(out, time.Duration(a.at-sent))
	}
	slices.Sort(out)
	return out
}

// producePath returns, for the same outputs as latencies, how long the
// producer held each one (acknowledgement − Produce call), sorted: the part
// of the latency spent after the design released the output.
func producePath(acks []ack, f *feeder, from, to int64) []time.Duration {
	out := make([]time.Duration, 0, len(acks))
	for _, a := range acks {
		if a.called == 0 { // exactly-once cost runs: visible at EndTxn, no hand-off time
			continue
		}
		if int(a.src.partition) >= len(f.sentAt) || a.src.offset >= int64(len(f.sentAt[a.src.partition])) {
			continue
		}
		if sent := f.sentAt[a.src.partition][a.src.offset].Load(); sent < from || sent > to {
			continue
		}
		out = append(out, time.Duration(a.at-a.called))
	}
	slices.Sort(out)
	return out
}

// quantile is the nearest-rank q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
