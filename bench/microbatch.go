package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/kafka"
)

// microBatch is the baseline of DESIGN §6, the design the chain replaces:
//
//	loop:
//	  poll up to BatchSize records (or until BatchLinger after the first)
//	    across all assigned partitions;
//	  for each stage in chain order (click, install, purchase):
//	    process all of the batch's records of that stage's type with a pool
//	    of W workers, each partition's records in offset order (or, with
//	    keyOrder, each key's), and wait for all of them;
//	  wait for every output's acknowledgement;
//	  persist every partition's state and checkpoints (PartitionStore.Checkpoint);
//	  commit the offsets.
//
// It uses the chain's own pieces: the stages' processors (with Sequence
// called in offset order before Process), the decoder, the store, the
// producer, the dead-letter format and retry policy.
//
// One addition keeps its outputs those of DESIGN §5 (the reference model):
// the chain's follower gate. An install at (o, t) may use a click at an
// offset after o whose arrival watermark is <= t+Lateness, so the engine
// processes it only once the click stage's watermark is > t+Lateness. A
// micro-batch that processed such an install at the end of a batch would
// miss that click, which arrives in the next batch. So each partition's
// share of a batch is cut before the first record a follower stage
// processes whose event time + Lateness is not below the stream time at the
// cut; the rest is held for the next batch (at most a few records: those
// after the partition's latest event time), or released when the partition
// received nothing for IdleTimeout — exactly the chain's gate and idle
// release.
type microBatch struct {
	addrs    []string
	sarama   *sarama.Config
	topic    string
	group    string
	stages   []chain.Stage
	names    []string
	seqs     []chain.Sequencer
	dec      chain.Decoder
	store    chain.Store // nil: no state (never for attribution)
	prod     chain.Producer
	out, dlq string
	lateness time.Duration
	idle     time.Duration
	size     int
	linger   time.Duration
	workers  int
	keyOrder bool
	prog     *progress
	log      *slog.Logger
	ready    func(claimed int)

	maxRetries          int
	backoff, maxBackoff time.Duration
	parts               map[int32]*mbPartition // owned by the batch loop (and Setup, between loops)
	// queues hold each claimed partition's records until a poll takes them
	// (bounded: BatchSize each); notify wakes a waiting poll.
	queues           map[int32]chan *sarama.ConsumerMessage
	order            []int32
	notify           chan struct{}
	rr               int
	claimsMu         sync.Mutex
	claims           map[int32]sarama.ConsumerGroupClaim
	loopErr          chan error
	batches, release atomic.Int64
	stop             context.CancelCauseFunc
}

// mbPartition is one assigned partition's state in the baseline.
type mbPartition struct {
	id          int32
	ps          chain.PartitionStore
	next        int64 // first offset not yet processed (the committed offset)
	stream      int64 // S(next), unix ns; 0 = none
	held        []chain.Event
	lastArrival time.Time
}

func (m *microBatch) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.stop = cancel
	m.parts = map[int32]*mbPartition{}
	m.claims = map[int32]sarama.ConsumerGroupClaim{}
	m.seqs = make([]chain.Sequencer, len(m.stages))
	m.names = make([]string, len(m.stages))
	for i, s := range m.stages {
		m.seqs[i], _ = s.Processor.(chain.Sequencer)
		m.names[i] = s.Name
	}
	defer func() {
		for _, p := range m.parts {
			if p.ps != nil {
				_ = p.ps.Close()
			}
		}
	}()
	cfg := *m.sarama
	cfg.ClientID = "differential-bench-microbatch"
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(m.addrs, m.group, &cfg)
	if err != nil {
		return fmt.Errorf("microbatch: consumer group: %w", err)
	}
	var logged sync.WaitGroup
	logged.Go(func() {
		for err := range group.Errors() {
			m.log.Warn("micro-batch consumer group error", "err", err)
		}
	})
	defer func() {
		_ = group.Close()
		logged.Wait()
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{m.topic}, m); err != nil && ctx.Err() == nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			m.log.Warn("micro-batch session failed; joining again", "err", err)
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// Setup opens the claimed partitions' state and starts the batch loop.
func (m *microBatch) Setup(sess sarama.ConsumerGroupSession) error {
	claims := sess.Claims()[m.topic]
	for _, p := range claims {
		mp, ok := m.parts[p]
		if !ok {
			mp = &mbPartition{id: p, next: -1}
			if m.store != nil {
				ps, err := m.store.OpenPartition(m.topic, p, m.names)
				if err != nil {
					return fmt.Errorf("microbatch: open state of %d: %w", p, err)
				}
				mp.ps = ps
			}
			m.parts[p] = mp
		}
		// Records polled in an earlier session and not processed are
		// delivered again from the committed offset.
		mp.held = nil
	}
	m.queues = make(map[int32]chan *sarama.ConsumerMessage, len(claims))
	m.order = append([]int32(nil), claims...)
	slices.Sort(m.order)
	for _, p := range claims {
		m.queues[p] = make(chan *sarama.ConsumerMessage, m.size)
	}
	m.notify = make(chan struct{}, 1)
	m.loopErr = make(chan error, 1)
	go func() {
		err := m.loop(sess)
		if err != nil {
			m.stop(err) // ends the session and the run
		}
		m.loopErr <- err
	}()
	if m.ready != nil {
		m.ready(len(claims))
	}
	return nil
}

// Cleanup waits for the batch loop (it finishes the batch in hand).
func (m *microBatch) Cleanup(sarama.ConsumerGroupSession) error {
	<-m.loopErr
	return nil
}

// ConsumeClaim forwards the partition's records to its queue.
func (m *microBatch) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	m.claimsMu.Lock()
	m.claims[claim.Partition()] = claim
	m.claimsMu.Unlock()
	q := m.queues[claim.Partition()]
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			select {
			case q <- msg:
				select {
				case m.notify <- struct{}{}:
				default:
				}
			case <-sess.Context().Done():
				return nil
			}
		case <-sess.Context().Done():
			return nil
		}
	}
}

func (m *microBatch) loop(sess sarama.ConsumerGroupSession) error {
	ctx := sess.Context()
	for {
		msgs := m.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// A batch in hand is finished even if the session ends meanwhile.
		if err := m.batch(context.WithoutCancel(ctx), sess, msgs); err != nil {
			return err
		}
	}
}

// poll waits for the first record (or until a held partition's idle
// deadline), then takes records until BatchSize or BatchLinger. It takes
// them round-robin, one per partition with records waiting: a fair share of
// the batch for every partition. (A Kafka consumer's poll hands out one
// partition's fetched records before the next one's, so a batch can hold a
// single partition; that would make the baseline nearly serial and the
// comparison unfair to it.)
func (m *microBatch) poll(ctx context.Context) []*sarama.ConsumerMessage {
	var wake <-chan time.Time
	if d, ok := m.nextRelease(); ok {
		// At least a few ms: a partition past its deadline that is not
		// caught up (see cut) must not make this loop spin.
		t := time.NewTimer(max(time.Until(d), 5*time.Millisecond))
		defer t.Stop()
		wake = t.C
	}
	msgs := make([]*sarama.ConsumerMessage, 0, m.size)
	for {
		if msgs = m.take(msgs); len(msgs) > 0 {
			break
		}
		select {
		case <-m.notify:
		case <-wake:
			return msgs
		case <-ctx.Done():
			return nil
		}
	}
	linger := time.NewTimer(m.linger)
	defer linger.Stop()
	for len(msgs) < m.size {
		n := len(msgs)
		if msgs = m.take(msgs); len(msgs) > n {
			continue
		}
		select {
		case <-m.notify:
		case <-linger.C:
			return msgs
		case <-ctx.Done():
			return msgs
		}
	}
	return msgs
}

// take appends waiting records round-robin across partitions, one at a
// time, until the batch is full or no partition has one.
func (m *microBatch) take(msgs []*sarama.ConsumerMessage) []*sarama.ConsumerMessage {
	for len(msgs) < m.size {
		progress := false
		for range m.order {
			if len(msgs) >= m.size {
				break
			}
			m.rr = (m.rr + 1) % len(m.order)
			select {
			case msg := <-m.queues[m.order[m.rr]]:
				msgs = append(msgs, msg)
				progress = true
			default:
			}
		}
		if !progress {
			break
		}
	}
	return msgs
}

// nextRelease is the earliest idle deadline of a partition holding records.
func (m *microBatch) nextRelease() (time.Time, bool) {
	var at time.Time
	found := false
	for _, p := range m.parts {
		if len(p.held) == 0 {
			continue
		}
		d := p.lastArrival.Add(m.idle)
		if !found || d.Before(at) {
			at, found = d, true
		}
	}
	return at, found
}

// share is one partition's part of a batch.
type share struct {
	part    *mbPartition
	evs     []chain.Event
	before  []int64   // S(o) of every record, unix ns
	after   int64     // S after the share
	evictWM time.Time // stream time at the share's start: a lower bound of S of every record still to process
}

func (m *microBatch) batch(ctx context.Context, sess sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage) error {
	now := time.Now()
	for _, msg := range msgs {
		p, ok := m.parts[msg.Partition]
		if !ok || msg.Topic != m.topic {
			continue
		}
		if p.next < 0 {
			p.next = msg.Offset
		}
		if want := p.next + int64(len(p.held)); msg.Offset < want {
			continue // delivered again after a rebalance
		}
		ev := chain.Event{Record: kafka.Record(msg)}
		ev.Decoded, ev.Err = m.dec.Decode(&ev.Record)
		p.held = append(p.held, ev)
		p.lastArrival = now
	}
	var shares []*share
	for _, p := range m.parts {
		if len(p.held) == 0 {
			continue
		}
		n := m.cut(p, now)
		if n == 0 {
			continue
		}
		s := &share{part: p, evs: p.held[:n:n], before: make([]int64, n), evictWM: unixTime(p.stream)}
		p.held = append([]chain.Event(nil), p.held[n:]...)
		stream := p.stream
		for i := range s.evs {
			s.before[i] = stream
			if ev := &s.evs[i]; ev.Err == nil {
				stream = max(stream, ev.Time.UnixNano())
			}
		}
		s.after = stream
		shares = append(shares, s)
	}
	if len(shares) == 0 {
		return nil
	}
	m.batches.Add(1)
	acks := &ackWait{}
	// Invalid records go to the dead-letter topic first, as the engine's
	// first stage does (DESIGN I7).
	for _, s := range shares {
		for i := range s.evs {
			if ev := &s.evs[i]; ev.Err != nil {
				m.deadLetter(acks, 0, ev, ev.Err)
			}
		}
	}
	for k := range m.stages {
		if err := m.phase(ctx, k, shares, acks); err != nil {
			return err
		}
	}
	if err := acks.wait(); err != nil {
		return fmt.Errorf("microbatch: produce: %w", err)
	}
	for _, s := range shares {
		p := s.part
		p.next = s.evs[len(s.evs)-1].Offset + 1
		p.stream = s.after
		m.prog.advance(p.id, p.next)
	}
	for _, s := range shares {
		if err := m.checkpoint(s.part); err != nil {
			return err
		}
		sess.MarkOffset(m.topic, s.part.id, s.part.next, "")
	}
	sess.Commit()
	return nil
}

// cut returns how many of p's held records may be processed now: the
// longest prefix in which every record a follower stage processes has event
// time + Lateness below the stream time at the prefix's end (the engine's
// gate: the leader's watermark is > t + Lateness), or all of them once the
// partition is idle — everything up to its high watermark polled, nothing
// new for IdleTimeout (the engine's idle release).
func (m *microBatch) cut(p *mbPartition, now time.Time) int {
	if now.Sub(p.lastArrival) >= m.idle && m.caughtUp(p) {
		m.release.Add(1)
		return len(p.held)
	}
	stream := p.stream
	need := int64(0)
	gated := false
	best := 0
	for i := range p.held {
		ev := &p.held[i]
		if ev.Err == nil {
			t := ev.Time.UnixNano()
			stream = max(stream, t)
			for _, s := range m.stages[1:] {
				if s.Filter == nil || s.Filter(ev) {
					need = max(need, t+int64(m.lateness))
					gated = true
					break
				}
			}
		}
		if !gated || need < stream {
			best = i + 1
		}
	}
	return best
}

// caughtUp reports whether p's polled records reach its high watermark.
func (m *microBatch) caughtUp(p *mbPartition) bool {
	m.claimsMu.Lock()
	c := m.claims[p.id]
	m.claimsMu.Unlock()
	if c == nil {
		return false
	}
	return p.next+int64(len(p.held)) >= c.HighWaterMarkOffset()
}

// phase runs stage k over every share: W workers; each task is one
// partition's records of the stage in offset order (or one key's, with
// keyOrder, after the partition's Sequence calls in offset order).
func (m *microBatch) phase(ctx context.Context, k int, shares []*share, acks *ackWait) error {
	type item struct {
		s *share
		i int
	}
	var tasks [][]item
	if !m.keyOrder {
		for _, s := range shares {
			var t []item
			for i := range s.evs {
				if m.accepts(k, &s.evs[i]) {
					t = append(t, item{s, i})
				}
			}
			if len(t) > 0 {
				tasks = append(tasks, t)
			}
		}
		return m.pool(len(tasks), func(ti int) error {
			for _, it := range tasks[ti] {
				if err := m.handle(ctx, k, it.s, it.i, acks, true); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Per-key order: Sequence in offset order per partition (partitions in
	// parallel), then each key's remaining records as one task.
	kept := make([][]item, len(shares))
	err := m.pool(len(shares), func(si int) error {
		s := shares[si]
		for i := range s.evs {
			if !m.accepts(k, &s.evs[i]) {
				continue
			}
			ok, err := m.sequence(k, s, i, acks)
			if err != nil {
				return err
			}
			if ok {
				kept[si] = append(kept[si], item{s, i})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ks := range kept {
		byKey := map[string]int{}
		for _, it := range ks {
			key := string(it.s.evs[it.i].Key)
			j, ok := byKey[key]
			if !ok {
				j = len(tasks)
				byKey[key] = j
				tasks = append(tasks, nil)
			}
			tasks[j] = append(tasks[j], it)
		}
	}
	return m.pool(len(tasks), func(ti int) error {
		for _, it := range tasks[ti] {
			if err := m.handle(ctx, k, it.s, it.i, acks, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// pool runs n tasks on min(W, n) workers and returns the first error.
func (m *microBatch) pool(n int, task func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(m.workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := task(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func (m *microBatch) accepts(k int, ev *chain.Event) bool {
	f := m.stages[k].Filter
	return ev.Err == nil && (f == nil || f(ev))
}

func (m *microBatch) context(k int, s *share, i int) *chain.Context {
	ev := &s.evs[i]
	tc := chain.TestContext{
		Topic: m.topic, Partition: s.part.id, Stage: m.names[k], Offset: ev.Offset,
		StreamTime: unixTime(s.before[i]), EvictionWatermark: s.evictWM,
	}
	if s.part.ps != nil {
		tc.State = s.part.ps.Stage(k)
	}
	return chain.NewTestContext(tc)
}

// sequence calls the stage's Sequencer, if any: false means the record is
// done (a duplicate, or dead-lettered).
func (m *microBatch) sequence(k int, s *share, i int, acks *ackWait) (bool, error) {
	seq := m.seqs[k]
	if seq == nil {
		return true, nil
	}
	ev := &s.evs[i]
	skip, err := seq.Sequence(m.context(k, s, i), ev)
	switch {
	case err != nil && chain.IsFatal(err):
		return false, m.recordError(k, ev, err)
	case err != nil:
		m.deadLetter(acks, k, ev, err)
		return false, nil
	}
	return !skip, nil
}

// handle sequences (when seq) and processes one record with the engine's
// retry policy, then produces its outputs.
func (m *microBatch) handle(ctx context.Context, k int, s *share, i int, acks *ackWait, seq bool) error {
	if seq {
		ok, err := m.sequence(k, s, i, acks)
		if err != nil || !ok {
			return err
		}
	}
	ev := &s.evs[i]
	backoff := m.backoff
	for attempt := 0; ; attempt++ {
		pc := m.context(k, s, i)
		err := m.stages[k].Processor.Process(ctx, pc, ev)
		if err == nil {
			msgs := pc.Emitted()
			if len(msgs) == 0 {
				return nil
			}
			for j := range msgs {
				if msgs[j].Topic == "" {
					msgs[j].Topic = m.out
				}
			}
			acks.add()
			m.prod.Produce(context.Background(), msgs, acks.done)
			return nil
		}
		if chain.IsFatal(err) {
			return m.recordError(k, ev, err)
		}
		if chain.IsPermanent(err) || attempt >= m.maxRetries {
			m.deadLetter(acks, k, ev, err)
			return nil
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, m.maxBackoff)
	}
}

func (m *microBatch) recordError(k int, ev *chain.Event, err error) error {
	return &chain.RecordError{Stage: m.names[k], Topic: ev.Topic, Partition: ev.Partition, Offset: ev.Offset, Err: err}
}

// deadLetter sends the record as the engine does: original key, value and
// headers plus the reason and source in chain.HeaderDLQ* headers.
func (m *microBatch) deadLetter(acks *ackWait, k int, ev *chain.Event, reason error) {
	h := make([]chain.Header, 0, len(ev.Headers)+5)
	h = append(h, ev.Headers...)
	h = append(h,
		chain.Header{Key: []byte(chain.HeaderDLQReason), Value: []byte(reason.Error())},
		chain.Header{Key: []byte(chain.HeaderDLQTopic), Value: []byte(ev.Topic)},
		chain.Header{Key: []byte(chain.HeaderDLQPartition), Value: strconv.AppendInt(nil, int64(ev.Partition), 10)},
		chain.Header{Key: []byte(chain.HeaderDLQOffset), Value: strconv.AppendInt(nil, ev.Offset, 10)},
		chain.Header{Key: []byte(chain.HeaderDLQStage), Value: []byte(m.names[k])},
	)
	acks.add()
	m.prod.Produce(context.Background(), []chain.Message{{Topic: m.dlq, Key: ev.Key, Value: ev.Value, Headers: h}}, acks.done)
}

// checkpoint persists the partition's state with every stage at its next
// offset, evicting what the slowest stage's watermark has passed (as the
// engine's checkpoint does).
func (m *microBatch) checkpoint(p *mbPartition) error {
	if p.ps == nil {
		return nil
	}
	cps := make([]commit.Checkpoint, len(m.names))
	for i, n := range m.names {
		cps[i] = commit.Checkpoint{Stage: n, Next: p.next, Watermark: p.stream}
	}
	var evict time.Time
	if p.stream != 0 {
		evict = time.Unix(0, p.stream-1)
	}
	if err := p.ps.Checkpoint(cps, evict); err != nil {
		return fmt.Errorf("microbatch: checkpoint %s/%d: %w", m.topic, p.id, err)
	}
	return nil
}

// ackWait waits for the acknowledgements of one batch's produce calls.
type ackWait struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs error
}

func (a *ackWait) add() { a.wg.Add(1) }

func (a *ackWait) done(err error) {
	if err != nil {
		a.mu.Lock()
		if a.errs == nil {
			a.errs = err
		}
		a.mu.Unlock()
	}
	a.wg.Done()
}

func (a *ackWait) wait() error {
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.errs
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
