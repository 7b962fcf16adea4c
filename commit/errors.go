package commit

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package either are one of these or
// wrap one of them; test with errors.Is.
var (
	// ErrWindowFull: Begin found the tracker's window full. It is a state, not
	// a fault: the caller waits until a Complete reports advanced=true (only
	// that frees a slot) and retries. Returned unwrapped, so Begin does not
	// allocate when the window is full.
	ErrWindowFull = errors.New("commit: tracker window full")
	// ErrOutOfOrder: Begin with an offset not greater than the last begun
	// offset, below the tracker's start, or math.MaxInt64.
	ErrOutOfOrder = errors.New("commit: offset out of order")
	// ErrDuplicate: Complete of an offset that is already completed: its slot
	// is marked done, or it lies below the position (the tracker does not
	// remember which offsets below the position were gaps, so completing a
	// never-begun offset there is reported as a duplicate too).
	ErrDuplicate = errors.New("commit: offset already completed")
	// ErrUnknownOffset: Complete of an offset at or above the position that
	// was never begun (a gap, or beyond the last begun offset).
	ErrUnknownOffset = errors.New("commit: offset not begun")
	// ErrMetadataTooLarge: the encoded metadata would exceed MaxMetadataLen.
	ErrMetadataTooLarge = errors.New("commit: metadata too large")
	// ErrInvalidCheckpoint: checkpoints that cannot be encoded (no stages, a
	// negative offset, a stage position below the committed offset).
	ErrInvalidCheckpoint = errors.New("commit: invalid checkpoint")
	// ErrStageMismatch: checkpoints whose stages differ from the Manager's.
	ErrStageMismatch = errors.New("commit: checkpoints do not match the stages")
	// ErrRegression: a commit would move a position backwards (I3).
	ErrRegression = errors.New("commit: position regression")
)

// TrackerError is returned by Tracker.Begin and Tracker.Complete for a misuse
// (ErrOutOfOrder, ErrDuplicate, ErrUnknownOffset). It unwraps to the sentinel.
type TrackerError struct {
	Op        string // "begin" or "complete"
	Offset    int64  // the offset passed to Op
	Next      int64  // the tracker's position at the time
	LastBegun int64  // the last begun offset (start-1 if none)
	Err       error  // the sentinel
}

func (e *TrackerError) Error() string {
	return fmt.Sprintf("%v: %s offset %d (position %d, last begun %d)",
		e.Err, e.Op, e.Offset, e.Next, e.LastBegun)
}

func (e *TrackerError) Unwrap() error { return e.Err }

// RegressionError is returned by Manager.Next when a stage's position is below
// the lowest position the last commit allows for it. It unwraps to
// ErrRegression.
type RegressionError struct {
	Stage     string
	Next      int64 // the stage's position passed to Next
	Floor     int64 // the lowest allowed: max(last committed offset, the stage's committed position)
	Committed int64 // the last committed offset
}

func (e *RegressionError) Error() string {
	return fmt.Sprintf("%v: stage %q at offset %d is below %d (last committed offset %d)",
		ErrRegression, e.Stage, e.Next, e.Floor, e.Committed)
}

func (e *RegressionError) Unwrap() error { return ErrRegression }
