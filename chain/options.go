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
	bufferBudget    int // WithBufferBudget; 0: none
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
	admission       bool // the key-scoped gate's admission step (WithoutCarriedOffsets)
	noCarry         bool // WithoutCarriedOffsets
	noIdleRecord    bool // WithoutRecordedIdleReleases
	// observer fans out to observers; nil when there is none (New).
	observer Observer
	// completion fans out to the observers that are CompletionObservers;
	// nil when there is none.
	completion CompletionObserver
	// noAsOf: WithAsOfReads(false).
	noAsOf bool
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
	case c.bufferBudget < 0:
		return fmt.Errorf("chain: buffer budget must be >= 0 records (0: none), got %d", c.bufferBudget)
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

// WithoutCarriedOffsets is the rolling-upgrade compatibility mode: the
// chain reads commit metadata of every version (dfl1, dfl2, dfl3) but
// writes no dfl3 that a binary before dfl3 would misread (it resets the
// state of a partition whose metadata it does not know). It implies the
// key-scoped gate's admission step (a follower begins records in offset
// order, as in exactly-once mode), so a stop drains to a contiguous
// completed set, and checkpoints carry no offsets completed above the
// position: the metadata
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

// WithAsOfReads(false) makes the followers' state reads see every write,
// as the first stage's do, instead of their leaders' writes below the
// record's horizon only (Context.Horizon; DESIGN.md "A follower reads as
// of its horizon"), and the store keeps no versions for them
// (HistoryKeeper). For processors that compare the offsets or event times
// of what they read with their record's themselves, as the attribution
// processors do (attribution.NewChain sets it): they give the same outputs
// either way, and the store's versions then cost CPU for nothing.
// Context.Horizon is unchanged. Default true.
func WithAsOfReads(on bool) Option {
	return optionFunc(func(c *config) { c.noAsOf = !on })
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

// WithBufferBudget bounds the handoff buffers of all the partitions the
// chain runs at once to about n records together: each partition's buffer
// holds at most n ÷ (partitions running) records, never more than
// WithBufferSize and never fewer than a floor of a few batches beyond the
// fetcher's read-ahead and the offset distance (BufferShareFloor), so that
// the buffer still hands records over. The shares are recomputed as
// partitions start and stop; a buffer whose share shrank releases its
// memory once its followers have read down to it (none of its records is
// dropped unread). A follower that falls further behind than its share
// polls Kafka itself, as with a small WithBufferSize. A slot costs about
// 220 bytes plus the record's key, value and headers while it holds a
// record. 0 (the default): no budget, every partition WithBufferSize.
func WithBufferBudget(n int) Option {
	return optionFunc(func(c *config) { c.bufferBudget = n })
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

// WithChangelog makes every partition's window state follow the partition
// through cl (DESIGN.md "State that follows its partition"): each checkpoint appends its state changes to the
// changelog before it persists them, the commit metadata carries the
// changelog offset, and a partition assigned to an instance whose local
// state does not match the commit is rebuilt from the changelog before its
// stages start. Requires WithStore with a store whose partitions implement
// ChangelogStore. Default nil: state stays on the instance that wrote it.
func WithChangelog(cl Changelog) Option {
	return optionFunc(func(c *config) { c.changelog = cl })
}

// WithWorkerCap caps the records in processing at once across every
// partition and every key-parallel stage (Stage.KeyConcurrency > 1) of the
// chain at n — the capacity of a service the processors share, say. A
// worker takes a slot when it takes a key. When slots are short, the key
// with the most records ready (released by its gate, in its stage's queue)
// goes first, and a worker keeps its slot between two records of its key
// unless a waiting key has more ready: a hot key's records — a chain no
// design can run in parallel, so every wait between them adds to the run's
// critical path — are not queued behind other keys' records. A stage
// without key parallelism runs on its own goroutine and takes no slot.
// Default 0: no cap beyond each stage's KeyConcurrency.
func WithWorkerCap(n int) Option {
	return optionFunc(func(c *config) { c.workerCap = n })
}

// WithTracer sets the tracer of records (see Tracer). Default nil: no
// spans, no headers added, and the cost is a nil check per record and
// stage.
func WithTracer(t Tracer) Option {
	return optionFunc(func(c *config) { c.tracer = t })
}

// WithExactlyOnce runs the chain in exactly-once mode (DESIGN.md "Exactly-once mode"): every
// commit cycle is one Kafka transaction of t holding the cycle's outputs,
// dead letters and changelog records and the consumed offsets of every
// partition (with the stages' positions and the changelog offset in their
// metadata). The state store becomes a cache of the changelog: a cycle's
// writes stay in the store's overlay, which the stages read through, and
// are persisted only after the transaction committed. A failed, fenced or
// timed-out transaction is aborted, the overlays dropped, and every
// partition restarts from its last committed positions. A cycle does not
// pause the partitions: it cuts every stage at its begin frontier, waits
// until the records below the cuts are complete — the records waiting in a
// key-scoped gate (GateKey) included: they wait only for leader records
// below the leader's cut — and commits positions at most the cuts, while
// the stages go on beginning and processing the records above them; those
// records' outputs and dead letters are deferred, in the order they were
// issued, until the transaction ended, and then sent into the next one
// (dropped with their records if it aborted). So a transaction holds
// exactly the outputs of a contiguous prefix per stage (no offsets above a
// position are ever committed), and the outputs keep their per-key order.
// Revoke and stop commit the partition's final checkpoint in a cycle and
// wait for it.
//
// t is also the chain's producer: WithProducer must not be given. With a
// store, WithChangelog is required (the changelog is where committed state
// lives; the store is rebuilt from it after a crash). Default: at-least-once
// (no transactions).
func WithExactlyOnce(t Transactor) Option {
	return optionFunc(func(c *config) { c.txn = t })
}

// WithTransactionLimits makes an exactly-once cycle commit early — before
// the commit interval ends — when its open transaction holds more than
// maxOutputs outputs and dead letters, or its partitions' store overlays
// more than maxWrites state writes: the overlay and the producer's buffers
// stay bounded whatever the interval (I9). Defaults DefaultTxnMaxOutputs
// and DefaultTxnMaxWrites; both must be > 0.
func WithTransactionLimits(maxOutputs, maxWrites int) Option {
	return optionFunc(func(c *config) { c.txnMaxOutputs, c.txnMaxWrites = maxOutputs, maxWrites })
}
