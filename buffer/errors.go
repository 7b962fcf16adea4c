package buffer

import (
	"errors"
	"fmt"
)

var (
	// ErrEvicted is returned (as an *EvictedError) by Read and TryRead when
	// the requested offset is below Low: the records were evicted and the
	// reader must poll Kafka until Room(cursor) reports it covered again.
	ErrEvicted = errors.New("buffer: offset evicted")
	// ErrClosed is returned by Append after Close, and by Read/TryRead once
	// drained when Close was called with a nil error.
	ErrClosed = errors.New("buffer: closed")
	// ErrOrder is returned (wrapped) by Append when offsets are not strictly
	// increasing or start below High. Nothing of that batch is appended.
	ErrOrder = errors.New("buffer: offsets not increasing")
)

// EvictedError reports a read below the ring's low bound. It unwraps to
// ErrEvicted.
type EvictedError struct {
	From int64 // the offset asked for
	Low  int64 // the ring's low bound at the time
}

func (e *EvictedError) Error() string {
	return fmt.Sprintf("%v: read from %d, buffer starts at %d", ErrEvicted, e.From, e.Low)
}

// Unwrap returns ErrEvicted.
func (e *EvictedError) Unwrap() error { return ErrEvicted }
