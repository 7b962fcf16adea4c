package chaintest

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Log is an in-memory partition: an append-only list of records with
// increasing offsets. It is a chain.Source; Poll opens independent readers.
type Log struct {
	topic     string
	partition int32

	mu      sync.Mutex
	recs    []chain.Record
	next    int64 // offset of the next appended record
	start   int64
	changed chan struct{}
	// MaxBatch bounds one Fetch (default 64).
	maxBatch int
	polls    int
	// fetchErr, when set, is returned by the main stream's next Fetch.
	fetchErr error
	cursor   int64 // main stream position
	recEnd   int64 // offset after the last record appended
	onFetch  func()
	stalled  bool // StallFetch: the main stream delivers nothing
	checks   int  // ConfirmEnd calls
}

var _ chain.EndConfirmer = (*Log)(nil)

func newLog(topic string, p int32) *Log {
	return &Log{topic: topic, partition: p, changed: make(chan struct{}), maxBatch: 64}
}

// SetMaxBatch bounds how many records one Fetch returns.
func (l *Log) SetMaxBatch(n int) {
	l.mu.Lock()
	l.maxBatch = n
	l.mu.Unlock()
}

// Skip leaves a gap of n offsets before the next record (like compaction
// or transaction markers).
func (l *Log) Skip(n int64) {
	l.mu.Lock()
	l.next += n
	l.mu.Unlock()
}

// Append adds records, assigning offsets, topic and partition; a zero
// Timestamp is left as is.
func (l *Log) Append(recs ...chain.Record) {
	l.mu.Lock()
	for _, r := range recs {
		r.Topic, r.Partition, r.Offset = l.topic, l.partition, l.next
		l.next++
		l.recEnd = l.next
		l.recs = append(l.recs, r)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Records returns a copy of the log.
func (l *Log) Records() []chain.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]chain.Record(nil), l.recs...)
}

// Start is the first offset of the log.
func (l *Log) Start() int64 { return l.start }

// End is the offset after the last record (the high watermark).
func (l *Log) End() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Truncate drops the records already read by the main stream (like log
// retention), keeping offsets; pollers must not need them any more.
func (l *Log) Truncate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := searchOffset(l.recs, l.cursor)
	if i == len(l.recs) && i > 0 {
		l.start = l.recs[i-1].Offset + 1
	} else if i < len(l.recs) {
		l.start = l.recs[i].Offset
	}
	l.recs = append([]chain.Record(nil), l.recs[i:]...)
}

// RecordsEnd is the offset after the last record (End without trailing gaps).
func (l *Log) RecordsEnd() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.start, l.recEnd)
}

// Len is the number of records.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// Polls is how many pollers were opened (polling-mode switches).
func (l *Log) Polls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.polls
}

// FailNextFetch makes the main stream's next Fetch return err.
func (l *Log) FailNextFetch(err error) {
	l.mu.Lock()
	l.fetchErr = err
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// StallFetch makes the main stream deliver nothing until ResumeFetch, as a
// fetcher stalled on a loaded machine or a slow connection: records
// appended meanwhile are in the log (HighWatermark, ConfirmEnd and pollers
// see them) but the partition's fetcher does not get them.
func (l *Log) StallFetch() {
	l.mu.Lock()
	l.stalled = true
	l.mu.Unlock()
}

// ResumeFetch ends StallFetch.
func (l *Log) ResumeFetch() {
	l.mu.Lock()
	l.stalled = false
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// ConfirmEnd implements chain.EndConfirmer: whether the log holds a record
// at or after from (gaps left by Skip — markers, aborted records — are not
// records), and the log's end (the high watermark).
func (l *Log) ConfirmEnd(ctx context.Context, from int64) (end int64, more bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks++
	return l.next, searchOffset(l.recs, from) < len(l.recs), nil
}

// EndChecks is how many times ConfirmEnd was called.
func (l *Log) EndChecks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks
}

// HighWatermark implements chain.Source.
func (l *Log) HighWatermark() int64 { return l.End() }

// Fetch implements chain.Source: the main stream starts at the first fetch
// position requested by the engine's committed offset, i.e. it begins at
// the log's start and the engine skips what it does not need.
func (l *Log) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	l.mu.Lock()
	hook := l.onFetch
	l.mu.Unlock()
	if hook != nil {
		hook() // the partition is running: wake WaitIdle
	}
	for {
		l.mu.Lock()
		if err := l.fetchErr; err != nil {
			l.fetchErr = nil
			l.mu.Unlock()
			return dst, err
		}
		out, n := dst, l.cursor
		if !l.stalled {
			out, n = l.readLocked(l.cursor, dst)
		}
		ch := l.changed
		if len(out) > len(dst) {
			l.cursor = n
			l.mu.Unlock()
			return out, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

// readLocked appends records with offset >= from; returns the next cursor.
func (l *Log) readLocked(from int64, dst []chain.Record) ([]chain.Record, int64) {
	i := searchOffset(l.recs, from)
	end := min(len(l.recs), i+l.maxBatch)
	if i >= end {
		return dst, from
	}
	dst = append(dst, l.recs[i:end]...)
	return dst, l.recs[end-1].Offset + 1
}

func searchOffset(recs []chain.Record, from int64) int {
	lo, hi := 0, len(recs)
	for lo < hi {
		m := (lo + hi) / 2
		if recs[m].Offset < from {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Poll implements chain.Source.
func (l *Log) Poll(ctx context.Context, from int64) (chain.Poller, error) {
	l.mu.Lock()
	l.polls++
	l.mu.Unlock()
	return &poller{l: l, cursor: from}, nil
}

type poller struct {
	l      *Log
	cursor int64
	closed bool
}

func (p *poller) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	if p.closed {
		return dst, io.ErrClosedPipe
	}
	for {
		p.l.mu.Lock()
		out, n := p.l.readLocked(p.cursor, dst)
		ch := p.l.changed
		p.l.mu.Unlock()
		if len(out) > len(dst) {
			p.cursor = n
			return out, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

func (p *poller) Close() error {
	p.closed = true
	return nil
}

// Rec builds a record with a key, value and event-time-free timestamp.
func Rec(key, value string, ts time.Time) chain.Record {
	return chain.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts}
}
