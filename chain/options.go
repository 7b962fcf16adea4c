package chain

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Chain. Each option's doc states its default.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// The defaults of the options that callers most often restate (CLI flags,
// benchmark settings).
const (
	DefaultIdleTimeout     = time.Second      // WithIdleTimeout
	DefaultBufferSize      = 8192             // WithBufferSize
	DefaultBatchSize       = 256              // WithBatchSize, at most the buffer size
	DefaultInFlight        = 1024             // WithInFlight; also bounds Stage.KeyConcurrency
	DefaultCommitInterval  = time.Second      // WithCommitInterval
	DefaultShutdownTimeout = 30 * time.Second // WithShutdownTimeout
)

type config struct {
	offsetDistance  int64
	lateness        time.Duration
	idleTimeout     time.Duration
	bufferSize      int
	batchSize       int
	batchSizeSet    bool // WithBatchSize was given; else batchSize follows the buffer size
	inFlight        int
	workerCap       int // WithWorkerCap; 0: none
	commitInterval  time.Duration
	shutdownTimeout time.Duration
	maxRetries      int
	retryBackoff    time.Duration
	maxRetryBackoff time.Duration
	outputTopic     string
	dlqTopic        string
	maxDeadLetter   int
	store           Store
	changelog       Changelog
	producer        Producer
	txn             Transactor // WithExactlyOnce; nil: at-least-once
	txnMaxOutputs   int
	txnMaxWrites    int
	logger          *slog.Logger
	observers       []Observer
	tracer          Tracer
	admission       bool // WithAdmissionStep
	noCarry         bool // WithoutCarriedOffsets
	noIdleRecord    bool // WithoutRecordedIdleReleases
	// observer fans out to observers; nil when there is none (New).
	observer Observer
	// completion fans out to the observers that are CompletionObservers;
	// nil when there is none.
	completion CompletionObserver
}

func defaultConfig() config {
	return config{
		offsetDistance:  0,
		lateness:        0,
		idleTimeout:     DefaultIdleTimeout,
		bufferSize:      DefaultBufferSize,
		batchSize:       DefaultBatchSize,
		inFlight:        DefaultInFlight,
		commitInterval:  DefaultCommitInterval,
		shutdownTimeout: DefaultShutdownTimeout,
		maxRetries:      5,
		retryBackoff:    10 * time.Millisecond,
		maxRetryBackoff: time.Second,
		maxDeadLetter:   DefaultMaxDeadLetterBytes,
		txnMaxOutputs:   DefaultTxnMaxOutputs,
		txnMaxWrites:    DefaultTxnMaxWrites,
		logger:          slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	if !c.batchSizeSet {
		c.batchSize = min(DefaultBatchSize, c.bufferSize)
	}
	switch {
	case c.offsetDistance < 0:
		return fmt.Errorf("chain: offset distance must be >= 0, got %d", c.offsetDistance)
	case c.lateness < 0:
		return fmt.Errorf("chain: lateness must be >= 0, got %v", c.lateness)
	case c.idleTimeout <= 0:
		return fmt.Errorf("chain: idle timeout must be > 0, got %v", c.idleTimeout)
	case c.bufferSize < 2:
		return fmt.Errorf("chain: buffer size must be >= 2 records, got %d", c.bufferSize)
	case c.batchSize < 1 || c.batchSize > c.bufferSize:
		return fmt.Errorf("chain: batch size must be in [1, buffer size %d], got %d", c.bufferSize, c.batchSize)
	case c.offsetDistance >= int64(c.bufferSize):
		return fmt.Errorf("chain: offset distance %d must be smaller than the buffer size %d, or every follower would always poll Kafka itself", c.offsetDistance, c.bufferSize)
	case c.inFlight < 1:
		return fmt.Errorf("chain: in-flight window must be >= 1, got %d", c.inFlight)
	case c.workerCap < 0:
		return fmt.Errorf("chain: worker cap must be >= 0 (0: none), got %d", c.workerCap)
	case c.commitInterval <= 0:
		return fmt.Errorf("chain: commit interval must be > 0, got %v", c.commitInterval)
	case c.shutdownTimeout <= 0:
		return fmt.Errorf("chain: shutdown timeout must be > 0, got %v", c.shutdownTimeout)
	case c.maxRetries < 0:
		return fmt.Errorf("chain: max retries must be >= 0, got %d", c.maxRetries)
	case c.retryBackoff <= 0 || c.maxRetryBackoff < c.retryBackoff:
		return fmt.Errorf("chain: retry backoff must be > 0 and <= its maximum, got %v and %v", c.retryBackoff, c.maxRetryBackoff)
	case c.maxDeadLetter < MinDeadLetterBytes:
		return fmt.Errorf("chain: max dead-letter size must be >= %d bytes, got %d", MinDeadLetterBytes, c.maxDeadLetter)
	case c.logger == nil:
		return fmt.Errorf("chain: logger must not be nil")
	case c.changelog != nil && c.store == nil:
		return fmt.Errorf("chain: a changelog (WithChangelog) needs a state store (WithStore)")
	case c.txn != nil && c.producer != nil:
		return fmt.Errorf("chain: in exactly-once mode outputs and dead letters go through the Transactor (WithExactlyOnce): do not give WithProducer too")
	case c.txn != nil && c.store != nil && c.changelog == nil:
		return fmt.Errorf("chain: exactly-once mode with a state store needs a changelog (WithChangelog): the store is a cache of it, rebuilt from it after a crash")
	case c.txnMaxOutputs <= 0 || c.txnMaxWrites <= 0:
		return fmt.Errorf("chain: transaction limits must be > 0, got %d outputs and %d writes", c.txnMaxOutputs, c.txnMaxWrites)
	}
	if c.txn != nil {
		c.producer = c.txn
	}
	return nil
}

// WithAdmissionStep keeps, in at-least-once mode, the key-scoped gate's
// admission step: a follower begins records in offset order, each once its
// leader has begun everything the record's rule names, so that a stop
// drains to a contiguous completed set. Without it (the default) a
// follower begins records as it reads them and they wait per key in the
// gate; a stop abandons those that cannot run and the commit metadata
// carries the offsets completed above each position (DESIGN.md
// "Choices the rules leave open", item 7). Exactly-once mode always has the step. For
// comparisons and tests.
func WithAdmissionStep() Option {
	return optionFunc(func(c *config) { c.admission = true })
}

// WithoutCarriedOffsets is the rolling-upgrade compatibility mode: the
// chain reads commit metadata of every version (dfl1, dfl2, dfl3) but
// writes no dfl3 that a binary before dfl3 would misread (it resets the
// state of a partition whose metadata it does not know). It implies
// WithAdmissionStep, so a stop drains to a contiguous completed set, and
// checkpoints carry no offsets completed above the position: the metadata
// is dfl1/dfl2, byte-identical to a binary before dfl3. One exception: a
// partition restored from dfl3 metadata (written by a member without this
// option) keeps the restored offsets that are still above its position
// (they were not processed again and must not be) and its metadata is dfl3
// until the position passes them — which can only happen once some member
// has run without the option (README "Upgrading to, and downgrading from,
// the dfl3: metadata").
func WithoutCarriedOffsets() Option {
	return optionFunc(func(c *config) { c.noCarry, c.noIdleRecord, c.admission = true, true, true })
}

// WithoutRecordedIdleReleases is the rolling-upgrade compatibility mode
// for binaries before dfl4: the chain reads commit metadata of every
// version but writes no dfl4, so the idle releases it decides at the live
// tail are not recorded (a replay decides them from the timestamps, as
// before dfl4; DESIGN.md "Recorded idle releases"), and at-least-once
// releases do not wait for a commit. One exception: a partition restored
// from dfl4 metadata keeps applying and carrying the restored decisions
// until the committed offset passes them. WithoutCarriedOffsets implies
// it.
func WithoutRecordedIdleReleases() Option {
	return optionFunc(func(c *config) { c.noIdleRecord = true })
}

// WithOffsetDistance sets the safety distance in offsets: a follower may
// begin offset o only when its leader's position is > o + d (DESIGN.md "The follower gate").
// Must be smaller than the buffer size. Default 0.
func WithOffsetDistance(d int64) Option {
	return optionFunc(func(c *config) { c.offsetDistance = d })
}

// WithLateness sets the event-time safety distance: a follower may process a
// record with event time t only when its leader's watermark is > t + l
// (DESIGN.md "The follower gate"). Default 0.
func WithLateness(l time.Duration) Option {
	return optionFunc(func(c *config) { c.lateness = l })
}

// WithIdleTimeout sets the gap in the input's Kafka timestamps after which a
// leader counts as idle, so the tail of a log never stalls: a follower record
// before such a gap is released once its leader completed the records up to
// it, and processed as of the offset past it (Context.Horizon). At the live
// tail the gap is quiet time after the last record's timestamp; with a Source
// that is an EndConfirmer it also needs a check of the log, asked after that
// deadline, that found nothing past what was fetched (DESIGN.md "Idle
// release"). Such a tail decision is recorded in the partition's commit
// metadata and applied again by every restart, restore and rewind of the
// group, since a later record's CreateTime may not show the gap (DESIGN.md
// "Recorded idle releases"); in at-least-once mode the release waits for
// the commit that carries it. Default 1s.
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.idleTimeout = d })
}

// WithBufferSize sets the per-partition handoff buffer capacity in records.
// The fetcher waits for the first stage when it holds this many unread
// records; followers that fall further behind poll Kafka themselves.
// Default 8192.
func WithBufferSize(n int) Option {
	return optionFunc(func(c *config) { c.bufferSize = n })
}

// WithBatchSize sets how many records a stage takes from the buffer (or its
// poller) at once; at most the buffer size. Default 256, or the buffer size
// if that is smaller.
func WithBatchSize(n int) Option {
	return optionFunc(func(c *config) { c.batchSize, c.batchSizeSet = n, true })
}

// WithInFlight sets the per-stage window of records begun but not completed
// (processing, or waiting for their outputs' acknowledgement). A stage waits
// when it is full. Default 1024.
func WithInFlight(n int) Option {
	return optionFunc(func(c *config) { c.inFlight = n })
}

// WithCommitInterval sets how often stage checkpoints are persisted and the
// partition's offset is committed (also on revoke and shutdown). Default 1s.
func WithCommitInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitInterval = d })
}

// WithShutdownTimeout bounds how long a stopping partition waits for its
// in-flight records before the final commit. Default 30s.
func WithShutdownTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shutdownTimeout = d })
}

// WithRetry sets how often a failing record is retried (max, default 5) and
// the exponential backoff between attempts (base default 10ms, capped at max
// default 1s): the stages' RetryPolicy. After the last attempt the record is
// dead-lettered. A record a stop finds waiting between two attempts is still
// retried: begun records finish within the shutdown timeout.
func WithRetry(max int, base, maxBackoff time.Duration) Option {
	return optionFunc(func(c *config) {
		c.maxRetries, c.retryBackoff, c.maxRetryBackoff = max, base, maxBackoff
	})
}

// WithOutputTopic sets the topic of emitted messages that name none.
// Default "" (such messages are an error).
func WithOutputTopic(t string) Option {
	return optionFunc(func(c *config) { c.outputTopic = t })
}

// WithDLQTopic sets the dead-letter topic. Default "": dead-lettered records
// are only logged and counted (no Kafka write).
func WithDLQTopic(t string) Option {
	return optionFunc(func(c *config) { c.dlqTopic = t })
}

// WithMaxDeadLetterBytes bounds a dead letter's key, value and headers
// together: a larger record is dead-lettered with its value cut to fit and
// headers giving the original size and SHA-256 (DeadLetter). Set it to what
// the producer and the dead-letter topic accept, minus the record overhead.
// Default DefaultMaxDeadLetterBytes; at least MinDeadLetterBytes.
func WithMaxDeadLetterBytes(n int) Option {
	return optionFunc(func(c *config) { c.maxDeadLetter = n })
}

// WithStore sets the state store. Default nil: State() operations fail with
// ErrNoStore and checkpoints live only in commit metadata.
func WithStore(s Store) Option {
	return optionFunc(func(c *config) { c.store = s })
}

// WithProducer sets the producer of outputs and dead letters. Default nil:
// emitting fails the record fatally.
func WithProducer(p Producer) Option {
	return optionFunc(func(c *config) { c.producer = p })
}

// WithLogger sets the structured logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithObserver adds o to the observers called on every record begun, stage
// advance and commit (invariant checkers, testers, progress meters, the
// metrics adapter chain/chainmetrics). It may be given several times: every
// observer is called, in the order given. Default: none.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	})
}

// Observer receives engine events; implementations must be fast and safe for
// concurrent use. Used by tests to check invariants at every step.
type Observer interface {
	// Begin is called when a stage begins (processes or skips) a record,
	// after the gate let it through.
	Begin(BeginInfo)
	// Advanced is called when a stage's position moves to next (watermark wm).
	Advanced(topic string, partition int32, stage int, next int64, wm time.Time)
	// Committed is called after Kafka acknowledged a commit.
	Committed(topic string, partition int32, offset int64, metadata string)
}

// BeginInfo describes one record a stage begins, with the leader's published
// checkpoint that released it: the last one the gate loaded, which may be
// older than the leader's checkpoint at that instant (positions and
// watermarks only grow, so an older one that lets the record through means
// the current one does too).
type BeginInfo struct {
	Topic      string
	Partition  int32
	Stage      int
	Offset     int64
	EventTime  time.Time
	Processing bool // the stage processes it (false: skips it)
	// LeaderNext is -1 for the first stage.
	LeaderNext      int64
	LeaderWatermark time.Time
	// Idle: the gate released it because the leader was idle.
	Idle bool
	// KeyScope: the stage's gate is key-scoped (GateKey). LeaderNext and
	// LeaderWatermark are then the leader's progress on the record's key:
	// every record of that key below LeaderNext was complete, and
	// LeaderWatermark is the stream time S(LeaderNext). The partition rule's
	// checks (LeaderNext > Offset + OffsetDistance, LeaderWatermark >
	// EventTime + Lateness) then read per key.
	KeyScope bool
}

// CompletionObserver is an Observer that is also told of every record a
// stage completes, before the completion is visible to any other stage (so
// an invariant checker has always heard of a leader's completion before
// the follower it releases begins). It costs a call per record and stage;
// meant for tests.
type CompletionObserver interface {
	Observer
	Completed(topic string, partition int32, stage int, offset int64)
}

// completions returns the observers among obs that are CompletionObservers,
// combined (nil if none).
func completions(obs []Observer) CompletionObserver {
	var cs completionFanout
	for _, o := range obs {
		if c, ok := o.(CompletionObserver); ok {
			cs = append(cs, c)
		}
	}
	switch len(cs) {
	case 0:
		return nil
	case 1:
		return cs[0]
	}
	return cs
}

type completionFanout []CompletionObserver

func (f completionFanout) Begin(b BeginInfo) {}

func (f completionFanout) Advanced(string, int32, int, int64, time.Time) {}

func (f completionFanout) Committed(string, int32, int64, string) {}

func (f completionFanout) Completed(topic string, partition int32, stage int, offset int64) {
	for _, o := range f {
		o.Completed(topic, partition, stage, offset)
	}
}

// PartitionObserver is an Observer that is also told when a partition starts
// and stops running (e.g. to register per-partition metrics, as
// chain/chainmetrics does). PartitionStarted runs once the partition's
// stages exist; stats returns the partition's current snapshot (as
// Chain.Stats) and may be called until PartitionStopped, which runs when
// RunPartition returns.
type PartitionObserver interface {
	Observer
	PartitionStarted(topic string, partition int32, stats func() PartitionStats)
	PartitionStopped(topic string, partition int32)
}

// fanout calls every observer of a chain, in order.
type fanout []Observer

// combine returns nil for no observer, the observer itself for one, and a
// fanout for several.
func combine(obs []Observer) Observer {
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return obs[0]
	}
	return fanout(obs)
}

func (f fanout) Begin(b BeginInfo) {
	for _, o := range f {
		o.Begin(b)
	}
}

func (f fanout) Advanced(topic string, partition int32, stage int, next int64, wm time.Time) {
	for _, o := range f {
		o.Advanced(topic, partition, stage, next, wm)
	}
}

func (f fanout) Committed(topic string, partition int32, offset int64, metadata string) {
	for _, o := range f {
		o.Committed(topic, partition, offset, metadata)
	}
}

func (f fanout) PartitionStarted(topic string, partition int32, stats func() PartitionStats) {
	for _, o := range f {
		if po, ok := o.(PartitionObserver); ok {
			po.PartitionStarted(topic, partition, stats)
		}
	}
}

func (f fanout) PartitionStopped(topic string, partition int32) {
	for _, o := range f {
		if po, ok := o.(PartitionObserver); ok {
			po.PartitionStopped(topic, partition)
		}
	}
}
