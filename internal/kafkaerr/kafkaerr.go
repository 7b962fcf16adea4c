// Package kafkaerr classifies the errors that sarama returns, so the engine can tell apart
// the outcomes that need different handling without string matching.
//
// It owns no state; every function is safe for concurrent use.
package kafkaerr

import (
	"errors"

	"github.com/IBM/sarama"
)

// IsFenced reports whether err (or an error it wraps) says that a newer producer instance
// owns the transactional id, so this one must stop producing and never retry:
//
//   - PRODUCER_FENCED (90; older sarama versions print it as "Unknown error"),
//   - INVALID_PRODUCER_EPOCH (47), which brokers before 2.7 and the produce path use for the
//     same condition,
//   - INVALID_TXN_STATE (48), what a zombie's next produce gets when its transaction was
//     aborted under it by the new owner's InitProducerId (kfake answers so; Kafka can when
//     the coordinator aborted the transaction): the producer cannot go on either way,
//   - INVALID_PRODUCER_ID_MAPPING (49), returned when the coordinator no longer maps the
//     transactional id to our producer id,
//   - TRANSACTION_COORDINATOR_FENCED (52).
//
// The reaction is the same for all of them: close the producer without committing, let the
// work of the open transaction be redone by whoever owns the id now (or by a fresh producer
// after re-initializing), and never count its records as delivered.
//
// It looks through %w wrapping, errors.Join, sarama.ProducerError and sarama.ProducerErrors
// (which reports a fenced error when any of its messages failed with one). A nil err is not
// fenced.
func IsFenced(err error) bool {
	if err == nil {
		return false
	}
	var many sarama.ProducerErrors
	if errors.As(err, &many) {
		for _, pe := range many {
			if pe != nil && IsFenced(pe.Err) {
				return true
			}
		}
	}
	for _, code := range fenced {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// fenced lists the broker error codes that mean "another producer owns this transactional id".
var fenced = [...]sarama.KError{
	sarama.ErrProducerFenced,
	sarama.ErrInvalidProducerEpoch,
	sarama.ErrInvalidTxnState,
	sarama.ErrInvalidProducerIDMapping,
	sarama.ErrTransactionCoordinatorFenced,
}
