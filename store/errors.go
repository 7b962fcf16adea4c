package store

import (
	"errors"
	"fmt"
)

// Sentinel errors; operations wrap them in an [*Error].
var (
	// ErrClosed: the partition or the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrPartitionOpen: OpenPartition on a partition that is open and not
	// closed yet (two handles would have two overlays).
	ErrPartitionOpen = errors.New("store: partition already open")
	// ErrInvalid: bad arguments (topic with '/', duplicate stage names,
	// checkpoints that do not match the stages, ...).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrCorrupt: a persisted value that this version cannot decode.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrOldFormat: OpenPebble on a database written in an earlier format
	// that this version does not read (see doc.go, "Format versions").
	ErrOldFormat = errors.New("store: state written in an older format")
)

// Error is the error of an operation on one partition's state.
type Error struct {
	Topic     string
	Partition int32
	Op        string // "open", "get", "set", "delete", "checkpoint", "checkpoints", "reset"
	Err       error
}

func (e *Error) Error() string {
	return fmt.Sprintf("store: %s %s/%d: %v", e.Op, e.Topic, e.Partition, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
