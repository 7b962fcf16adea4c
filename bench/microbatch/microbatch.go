package microbatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// Config configures a Baseline. Brokers, Topic, Group, Stages, Decoder and
// Producer are required.
type Config struct {
	Brokers []string
	// Sarama is the base client configuration (copied; the baseline sets its
	// client id and turns auto-commit off).
	Sarama *sarama.Config
	Topic  string
	Group  string
	// Stages, Decoder, Store and Producer are the chain's own pieces: the
	// same processors (Sequence called in offset order before Process), the
	// same state store and producer. Store may be nil (no state).
	Stages   []chain.Stage
	Decoder  chain.Decoder
	Store    chain.Store
	Producer chain.Producer
	// OutputTopic receives outputs that name no topic; DLQTopic dead
	// letters (built as the chain builds them: chain.DeadLetter).
	OutputTopic, DLQTopic string
	// MaxDeadLetterBytes bounds a dead letter (default
	// chain.DefaultMaxDeadLetterBytes).
	MaxDeadLetterBytes int
	// Lateness and IdleTimeout are the chain's gate settings, applied at
	// batch boundaries (see Baseline).
	Lateness, IdleTimeout time.Duration
	// WithoutAsOfReads is the chain's WithAsOfReads(false): the store
	// keeps no versions for reads as of a record's horizon (for processors
	// that compare offsets and times themselves).
	WithoutAsOfReads bool
	// BatchSize and BatchLinger bound one poll (BatchLinger 0: a poll
	// returns what has arrived, as Kafka's poll does); Workers is the pool
	// size.
	BatchSize   int
	BatchLinger time.Duration
	Workers     int
	// KeyOrder keeps per-key instead of per-partition order.
	KeyOrder bool
	// AsyncCommit commits in the background on a client of its own (as the
	// chain does): the batch loop hands the batch's offsets over and goes
	// on; a commit in flight is followed by one for the latest offsets.
	// Without it the loop commits synchronously on the consumer group's
	// client (sarama's session Commit), whose connection also carries the
	// fetches.
	AsyncCommit bool
	// GroupCheckpoint persists every partition of a batch in one synced
	// batch (store.CheckpointAll; Store must be a package store DB or
	// Memory). Without it each partition's PartitionStore.Checkpoint is
	// called in turn, one sync each.
	GroupCheckpoint bool
	// Checkpointed, when set, is called after each synced checkpoint write
	// with the partitions it covered; Committed after each commit Kafka
	// acknowledged, with its number of partitions.
	Checkpointed func(partitions []int32)
	Committed    func(partitions int)
	// Retry is the retry policy of failing records (the chain's).
	Retry  chain.RetryPolicy
	Logger *slog.Logger
	// Progress, when set, is told each partition's committed offset after
	// every batch.
	Progress func(partition int32, next int64)
	// Ready, when set, is called at every session start with the number of
	// claimed partitions.
	Ready func(claimed int)
}

// New returns the baseline for cfg; Run runs it.
func New(cfg Config) *Baseline {
	if cfg.MaxDeadLetterBytes <= 0 {
		cfg.MaxDeadLetterBytes = chain.DefaultMaxDeadLetterBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Baseline{cfg: cfg, stages: cfg.Stages, lateness: cfg.Lateness, idle: cfg.IdleTimeout}
}

// Batches is how many batches the baseline processed.
func (m *Baseline) Batches() int64 { return m.batches.Load() }

// IdleReleases is how many times a partition's held records were released
// because it received nothing for IdleTimeout.
func (m *Baseline) IdleReleases() int64 { return m.release.Load() }

// Syncs is how many synced checkpoint writes the baseline made; Commits how
// many commits Kafka acknowledged.
func (m *Baseline) Syncs() int64   { return m.syncs.Load() }
func (m *Baseline) Commits() int64 { return m.commits.Load() }

// Baseline is the micro-batch design of DESIGN.md "The micro-batch baseline", the design the chain
// replaces:
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
// called in offset order before Process, each call with a chain.NewContext),
// the decoder, the store, the producer, the dead letters
// (chain.DeadLetter, chain.ProduceDeadLetter), the retry policy
// (chain.RetryPolicy) and the eviction rule (chain.EvictBefore).
//
// One addition keeps its outputs those of DESIGN.md "Attribution rules" (the reference model):
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
type Baseline struct {
	cfg      Config
	stages   []chain.Stage
	names    []string
	seqs     []chain.Sequencer
	lateness time.Duration
	idle     time.Duration

	parts map[int32]*mbPartition // owned by the batch loop (and Setup, between loops)
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
	syncs, commits   atomic.Int64
	stop             context.CancelCauseFunc
	// committer is the background committer of the current session
	// (AsyncCommit); commitClient its client, shared by sessions.
	committer    *committer
	commitClient sarama.Client
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

// Run consumes the topic as a member of the group until ctx ends (nil) or a
// batch fails (its error).
func (m *Baseline) Run(ctx context.Context) error {
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
	cfg := *m.cfg.Sarama
	cfg.ClientID = "differential-bench-microbatch"
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	if m.cfg.AsyncCommit {
		cc := cfg
		cc.ClientID = "differential-bench-microbatch-commit"
		client, err := sarama.NewClient(m.cfg.Brokers, &cc)
		if err != nil {
			return fmt.Errorf("microbatch: commit client: %w", err)
		}
		defer func() { _ = client.Close() }()
		m.commitClient = client
	}
	group, err := sarama.NewConsumerGroup(m.cfg.Brokers, m.cfg.Group, &cfg)
	if err != nil {
		return fmt.Errorf("microbatch: consumer group: %w", err)
	}
	var logged sync.WaitGroup
	logged.Go(func() {
		for err := range group.Errors() {
			m.cfg.Logger.Warn("micro-batch consumer group error", "err", err)
		}
	})
	defer func() {
		_ = group.Close()
		logged.Wait()
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{m.cfg.Topic}, m); err != nil && ctx.Err() == nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			m.cfg.Logger.Warn("micro-batch session failed; joining again", "err", err)
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// Setup opens the claimed partitions' state and starts the batch loop.
func (m *Baseline) Setup(sess sarama.ConsumerGroupSession) error {
	claims := sess.Claims()[m.cfg.Topic]
	for _, p := range claims {
		mp, ok := m.parts[p]
		if !ok {
			mp = &mbPartition{id: p, next: -1}
			if m.cfg.Store != nil {
				ps, err := m.cfg.Store.OpenPartition(m.cfg.Topic, p, m.names)
				if err != nil {
					return fmt.Errorf("microbatch: open state of %d: %w", p, err)
				}
				if hk, ok := ps.(chain.HistoryKeeper); ok && m.cfg.WithoutAsOfReads {
					hk.KeepHistory(false)
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
		m.queues[p] = make(chan *sarama.ConsumerMessage, m.cfg.BatchSize)
	}
	m.notify = make(chan struct{}, 1)
	m.loopErr = make(chan error, 1)
	if m.cfg.AsyncCommit {
		m.committer = newCommitter(m, sess)
	}
	go func() {
		err := m.loop(sess)
		if err != nil {
			m.stop(err) // ends the session and the run
		}
		m.loopErr <- err
	}()
	if m.cfg.Ready != nil {
		m.cfg.Ready(len(claims))
	}
	return nil
}

// Cleanup waits for the batch loop (it finishes the batch in hand) and,
// with AsyncCommit, for the commit of the last batch's offsets.
func (m *Baseline) Cleanup(sarama.ConsumerGroupSession) error {
	err := <-m.loopErr
	if m.committer != nil {
		if cerr := m.committer.close(); cerr != nil && err == nil {
			m.cfg.Logger.Warn("micro-batch final commit failed", "err", cerr)
		}
		m.committer = nil
	}
	return nil
}

// ConsumeClaim forwards the partition's records to its queue.
func (m *Baseline) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
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

func (m *Baseline) loop(sess sarama.ConsumerGroupSession) error {
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
func (m *Baseline) poll(ctx context.Context) []*sarama.ConsumerMessage {
	var wake <-chan time.Time
	if d, ok := m.nextRelease(); ok {
		// At least a few ms: a partition past its deadline that is not
		// caught up (see cut) must not make this loop spin.
		t := time.NewTimer(max(time.Until(d), 5*time.Millisecond))
		defer t.Stop()
		wake = t.C
	}
	msgs := make([]*sarama.ConsumerMessage, 0, m.cfg.BatchSize)
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
	linger := time.NewTimer(m.cfg.BatchLinger)
	defer linger.Stop()
	for len(msgs) < m.cfg.BatchSize {
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
func (m *Baseline) take(msgs []*sarama.ConsumerMessage) []*sarama.ConsumerMessage {
	for len(msgs) < m.cfg.BatchSize {
		progress := false
		for range m.order {
			if len(msgs) >= m.cfg.BatchSize {
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
func (m *Baseline) nextRelease() (time.Time, bool) {
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
	horizon []int64   // chain.Context.Horizon of every record (0: none)
	after   int64     // S after the share
	evictWM time.Time // stream time at the share's start: a lower bound of S of every record still to process
}

func (m *Baseline) batch(ctx context.Context, sess sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage) error {
	now := time.Now()
	for _, msg := range msgs {
		p, ok := m.parts[msg.Partition]
		if !ok || msg.Topic != m.cfg.Topic {
			continue
		}
		if p.next < 0 {
			p.next = msg.Offset
		}
		if want := p.next + int64(len(p.held)); msg.Offset < want {
			continue // delivered again after a rebalance
		}
		ev := chain.Event{Record: kafka.Record(msg)}
		ev.Decoded, ev.Err = m.cfg.Decoder.Decode(&ev.Record)
		p.held = append(p.held, ev)
		p.lastArrival = now
	}
	var shares []*share
	for _, p := range m.parts {
		if len(p.held) == 0 {
			continue
		}
		idle := m.idleNow(p, now)
		n := m.cut(p, now)
		if n == 0 {
			continue
		}
		s := &share{part: p, evs: p.held[:n:n], before: make([]int64, n), evictWM: unixTime(p.stream)}
		s.horizon = m.horizons(s.evs, p.held[n:], idle)
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
				m.deadLetter(ctx, acks, 0, ev, ev.Err)
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
		if m.cfg.Progress != nil {
			m.cfg.Progress(p.id, p.next)
		}
	}
	if err := m.checkpoint(shares); err != nil {
		return err
	}
	if m.committer != nil {
		offs := make(map[int32]int64, len(shares))
		for _, s := range shares {
			offs[s.part.id] = s.part.next
		}
		m.committer.offer(offs)
		return nil
	}
	for _, s := range shares {
		sess.MarkOffset(m.cfg.Topic, s.part.id, s.part.next, "")
	}
	sess.Commit()
	m.commits.Add(1)
	if m.cfg.Committed != nil {
		m.cfg.Committed(len(shares))
	}
	return nil
}

// cut returns how many of p's held records may be processed now: the
// longest prefix in which every record a follower stage processes has event
// time + Lateness below the stream time at the prefix's end (the engine's
// gate: the leader's watermark is > t + Lateness), or all of them once the
// partition is idle — everything up to its high watermark polled, nothing
// new for IdleTimeout (the engine's idle release).
func (m *Baseline) cut(p *mbPartition, now time.Time) int {
	if m.idleNow(p, now) {
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
					need = max(need, addSaturating(t, int64(m.lateness)))
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

// idleNow reports whether p is idle: everything up to its high watermark
// polled, nothing new for IdleTimeout.
func (m *Baseline) idleNow(p *mbPartition, now time.Time) bool {
	return now.Sub(p.lastArrival) >= m.idle && m.caughtUp(p)
}

// horizons is the engine's chain.Context.Horizon of every record of a
// share: 1 + the offset of the first record at or after it whose next
// record's Kafka timestamp is more than IdleTimeout after its own (the
// next record after the share is rest's first), or, for the records after
// the last such gap, the share's end when it was released by idleness (the
// quiet tail); 0 (none) otherwise.
func (m *Baseline) horizons(evs, rest []chain.Event, idle bool) []int64 {
	h := make([]int64, len(evs))
	n := len(evs)
	next := int64(0)
	switch {
	case len(rest) > 0 && rest[0].Timestamp.Sub(evs[n-1].Timestamp) > m.idle:
		next = evs[n-1].Offset + 1
	case len(rest) == 0 && idle:
		next = evs[n-1].Offset + 1
	}
	for i := n - 1; i >= 0; i-- {
		if i+1 < n && evs[i+1].Timestamp.Sub(evs[i].Timestamp) > m.idle {
			next = evs[i].Offset + 1
		}
		h[i] = next
	}
	return h
}

// caughtUp reports whether p's polled records reach its high watermark.
func (m *Baseline) caughtUp(p *mbPartition) bool {
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
func (m *Baseline) phase(ctx context.Context, k int, shares []*share, acks *ackWait) error {
	type item struct {
		s *share
		i int
	}
	var tasks [][]item
	if !m.cfg.KeyOrder {
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
			ok, err := m.sequence(ctx, k, s, i, acks)
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
func (m *Baseline) pool(n int, task func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(m.cfg.Workers, n) {
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

func (m *Baseline) accepts(k int, ev *chain.Event) bool {
	f := m.stages[k].Filter
	return ev.Err == nil && (f == nil || f(ev))
}

func (m *Baseline) context(k int, s *share, i int) *chain.Context {
	ev := &s.evs[i]
	o := chain.ContextOptions{
		Topic: m.cfg.Topic, Partition: s.part.id, Stage: m.names[k], Offset: ev.Offset,
		StreamTime: unixTime(s.before[i]), EvictionWatermark: s.evictWM,
	}
	if k > 0 {
		o.Horizon = s.horizon[i]
	}
	if s.part.ps != nil {
		o.State = s.part.ps.Stage(k)
	}
	return chain.NewContext(o)
}

// sequence calls the stage's Sequencer, if any: false means the record is
// done (a duplicate, or dead-lettered).
func (m *Baseline) sequence(ctx context.Context, k int, s *share, i int, acks *ackWait) (bool, error) {
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
		m.deadLetter(ctx, acks, k, ev, err)
		return false, nil
	}
	return !skip, nil
}

// handle sequences (when seq) and processes one record with the engine's
// retry policy, then produces its outputs.
func (m *Baseline) handle(ctx context.Context, k int, s *share, i int, acks *ackWait, seq bool) error {
	if seq {
		ok, err := m.sequence(ctx, k, s, i, acks)
		if err != nil || !ok {
			return err
		}
	}
	ev := &s.evs[i]
	var pc *chain.Context
	err := m.cfg.Retry.Do(ctx, func() error {
		pc = m.context(k, s, i)
		return m.stages[k].Processor.Process(ctx, pc, ev)
	})
	switch {
	case err == nil:
		msgs := pc.Emitted()
		if len(msgs) == 0 {
			return nil
		}
		for j := range msgs {
			if msgs[j].Topic == "" {
				msgs[j].Topic = m.cfg.OutputTopic
			}
		}
		acks.add()
		m.cfg.Producer.Produce(ctx, msgs, acks.done)
		return nil
	case chain.IsFatal(err) || ctx.Err() != nil:
		return m.recordError(k, ev, err)
	default:
		m.deadLetter(ctx, acks, k, ev, err)
		return nil
	}
}

func (m *Baseline) recordError(k int, ev *chain.Event, err error) error {
	return &chain.RecordError{Stage: m.names[k], Topic: ev.Topic, Partition: ev.Partition, Offset: ev.Offset, Err: err}
}

// addSaturating is t + d (d >= 0), or the largest int64 if that overflows
// (the chain's gate saturates the same way).
func addSaturating(t, d int64) int64 {
	if t > math.MaxInt64-d {
		return math.MaxInt64
	}
	return t + d
}

// deadLetter sends the record as the engine does (chain.DeadLetter,
// chain.ProduceDeadLetter).
func (m *Baseline) deadLetter(ctx context.Context, acks *ackWait, k int, ev *chain.Event, reason error) {
	acks.add()
	msg := chain.DeadLetter(m.cfg.DLQTopic, m.names[k], &ev.Record, reason, m.cfg.MaxDeadLetterBytes)
	chain.ProduceDeadLetter(ctx, m.cfg.Producer, msg, acks.done)
}

// checkpoint persists the state of the batch's partitions with every stage
// at its next offset, evicting what the slowest stage's watermark has
// passed (as the engine's checkpoint does): one partition after another,
// or, with GroupCheckpoint, all in one synced batch.
func (m *Baseline) checkpoint(shares []*share) error {
	if m.cfg.Store == nil {
		return nil
	}
	item := func(p *mbPartition) store.PartitionCheckpoint {
		cps := make([]commit.Checkpoint, len(m.names))
		for i, n := range m.names {
			cps[i] = commit.Checkpoint{Stage: n, Next: p.next, Watermark: p.stream}
		}
		return store.PartitionCheckpoint{Store: p.ps, Checkpoints: cps, EvictBefore: chain.EvictBefore(unixTime(p.stream))}
	}
	synced := func(parts ...int32) {
		m.syncs.Add(1)
		if m.cfg.Checkpointed != nil {
			m.cfg.Checkpointed(parts)
		}
	}
	if m.cfg.GroupCheckpoint {
		items := make([]store.PartitionCheckpoint, len(shares))
		parts := make([]int32, len(shares))
		for i, s := range shares {
			items[i], parts[i] = item(s.part), s.part.id
		}
		if err := store.CheckpointAll(items); err != nil {
			return fmt.Errorf("microbatch: checkpoint %d partitions of %s: %w", len(items), m.cfg.Topic, err)
		}
		synced(parts...)
		return nil
	}
	for _, s := range shares {
		it := item(s.part)
		if err := it.Store.Checkpoint(it.Checkpoints, it.EvictBefore); err != nil {
			return fmt.Errorf("microbatch: checkpoint %s/%d: %w", m.cfg.Topic, s.part.id, err)
		}
		synced(s.part.id)
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
