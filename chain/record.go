package chain

import (
	"context"
	"time"
)

// Header is a Kafka record header.
type Header struct {
	Key, Value []byte
}

// Record is one Kafka record of the chain's input topic, as the engine sees it.
// Sources fill it; the engine never mutates Key, Value or Headers.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time // the Kafka record's own timestamp
}

// Decoded is what a chain's Decoder extracts from a record, once per record;
// every stage sees the same value.
type Decoded struct {
	// Type routes the record to stages (e.g. "click"); filters usually test it.
	Type string
	// Time is the record's event time. It drives watermarks, the follower
	// gate's lateness rule and StreamTime.
	Time time.Time
	// Payload is the decoded value, opaque to the engine. (Named Payload,
	// not Value, because Event embeds both Record and Decoded.)
	Payload any
}

// Event is a record together with its decoded form, as handed to filters and
// processors. Err is non-nil when the record could not be decoded or
// validated: the first stage sends it to the dead-letter topic and every
// stage counts it as completed (DESIGN I7).
type Event struct {
	Record
	Decoded
	Err error

	// span is this stage's span of the record (WithTracer), or nil. Each
	// stage reads its own copy of the event, so it travels with the record
	// through the stage (key queues, workers) and no further.
	span RecordSpan
	// asOf is the record's horizon at a follower (Context.Horizon); 0:
	// none (math.MaxInt64). Set by the stage's gate on its own copy.
	asOf int64
}

// Decoder decodes and validates a record. It must be deterministic and safe
// for concurrent use: the fetcher and polling followers call it. A non-nil
// error marks the record invalid (dead-lettered with the error's text as reason).
type Decoder interface {
	Decode(r *Record) (Decoded, error)
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(r *Record) (Decoded, error)

// Decode calls f.
func (f DecoderFunc) Decode(r *Record) (Decoded, error) { return f(r) }

// Message is an output record a processor emits. An empty Topic means the
// chain's output topic (WithOutputTopic).
type Message struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Processor handles the records a stage accepts. Process may be called
// concurrently for records of different keys when the stage is key-parallel;
// records of one key are always processed one at a time in offset order.
//
// Errors: a plain error is retried with bounded exponential backoff and then
// dead-lettered; Permanent(err) is dead-lettered at once; Fatal(err) stops the
// engine cleanly (DESIGN I8).
type Processor interface {
	Process(ctx context.Context, pc *Context, ev *Event) error
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(ctx context.Context, pc *Context, ev *Event) error

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, pc *Context, ev *Event) error {
	return f(ctx, pc, ev)
}

// Sequencer is an optional interface of a Processor. Sequence runs on the
// stage's own goroutine, for every accepted record strictly in offset order,
// before the record is dispatched (and before any key-parallel fan-out). It is
// where order-sensitive, cross-key decisions belong (deduplication by event
// id): returning skip=true completes the record without calling Process. Its
// state writes belong to the record, like Process's.
type Sequencer interface {
	Sequence(pc *Context, ev *Event) (skip bool, err error)
}

// State is a stage's view of the partition's window state. Reads see every
// write made so far by any stage of this partition (persisted or not); writes
// are tagged with the current record's offset and persisted atomically with
// the stage's position at the next checkpoint that covers the record, never
// before (DESIGN I4). Keys are scoped to the partition by the engine.
//
// An entry with a non-zero expiry is deleted by the engine once the event-time
// watermark of the chain's last stage passes it; use it for window eviction.
// Values passed to Set must not be modified afterwards; values returned by Get
// must not be modified. Keys are not retained: a key buffer may be reused once
// the call returns.
//
// Scan calls fn with every entry whose key is in [lo, hi) (hi nil: no upper
// bound), in ascending key order, until fn returns false; ScanReverse in
// descending order. They see what Get sees, and cost a seek plus a step per
// entry passed, whatever else the state holds, so "the latest entry of a
// key prefix below x" is one ScanReverse that stops at the first entry. key
// and value are valid only during the call to fn and must not be modified;
// lo and hi must not change during the scan.
type State interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte, expires time.Time) error
	Delete(key []byte) error
	Scan(lo, hi []byte, fn func(key, value []byte) bool) error
	ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error
}
