package chain

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrShutdownTimeout: in-flight records did not finish within the shutdown timeout;
	// only what completed was committed.
	ErrShutdownTimeout = errors.New("chain: shutdown timeout: in-flight records abandoned (not committed)")
	// ErrFinalCommit: the partition stopped cleanly but Kafka refused or
	// did not acknowledge its final commit (e.g. the group generation
	// ended), or the final checkpoint before it failed (its changelog
	// append or store write — brokers down at the stop; the cause is
	// joined); the next owner resumes from the previous commit and repeats
	// what completed since. Exactly-once mode reports an aborted final
	// transaction so too.
	ErrFinalCommit = errors.New("chain: final commit failed")
	// ErrMessageTooLarge is what a Producer's error wraps when Kafka or the
	// client refuses a message for its size; the chain then produces a
	// minimal dead letter instead of failing the partition
	// (ProduceDeadLetter).
	ErrMessageTooLarge = errors.New("chain: message too large")
)

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// Permanent marks a processor error that retrying cannot fix: the record goes
// to the dead-letter topic at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Fatal marks a processor error that must stop the engine: it stops cleanly,
// committing only what is complete (DESIGN I8).
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return fatalError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// RecordError is an error tied to one record of one stage.
type RecordError struct {
	Stage     string
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("chain: stage %q %s/%d@%d: %v", e.Stage, e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// PartitionError is an error that stopped one partition's chain.
type PartitionError struct {
	Topic     string
	Partition int32
	Err       error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("chain: partition %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }
