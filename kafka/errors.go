package kafka

import (
	"errors"
	"strings"

	"github.com/IBM/sarama"
)

// errClass is what a broker error code means for the adapter: one table
// (kafkaErrors) answers every question the adapter asks of an error — may a
// group session be joined again, may a commit or offset fetch be retried,
// was a producer fenced, was a message refused for its size.
type errClass uint8

const (
	// classCoordinator: the group coordinator moved, is loading, or did not
	// answer in time; find it again and retry.
	classCoordinator errClass = iota + 1
	// classMembership: the member lost its generation (a rebalance is under
	// way). A session joins again; a commit from it is final, the next owner
	// resumes from the last accepted commit.
	classMembership
	// classLeadership: a partition's leader or replicas are moving; retry
	// after a metadata refresh.
	classLeadership
	// classFenced: another producer owns the transactional id (or the
	// transaction was aborted under it): stop producing, never retry, count
	// nothing of the open transaction as delivered.
	classFenced
	// classTooLarge: a message or batch exceeds what the broker accepts.
	classTooLarge
)

// kafkaErrors classifies the broker error codes the adapter handles; codes
// that are not listed are final.
var kafkaErrors = map[sarama.KError]errClass{
	sarama.ErrNotCoordinatorForConsumer:       classCoordinator,
	sarama.ErrConsumerCoordinatorNotAvailable: classCoordinator,
	sarama.ErrOffsetsLoadInProgress:           classCoordinator,
	sarama.ErrRequestTimedOut:                 classCoordinator,
	sarama.ErrNetworkException:                classCoordinator,
	sarama.ErrUnstableOffsetCommit:            classCoordinator,

	sarama.ErrRebalanceInProgress: classMembership,
	sarama.ErrUnknownMemberId:     classMembership,
	sarama.ErrIllegalGeneration:   classMembership,

	sarama.ErrLeaderNotAvailable:    classLeadership,
	sarama.ErrNotLeaderForPartition: classLeadership,
	sarama.ErrReplicaNotAvailable:   classLeadership,
	sarama.ErrBrokerNotAvailable:    classLeadership,
	sarama.ErrNotEnoughReplicas:     classLeadership,

	// PRODUCER_FENCED (90; older sarama prints it "Unknown error");
	// INVALID_PRODUCER_EPOCH (47), which brokers before 2.7 and the produce
	// path use for the same; INVALID_TXN_STATE (48), what a zombie's next
	// produce gets when the new owner's InitProducerId aborted its
	// transaction; INVALID_PRODUCER_ID_MAPPING (49); and
	// TRANSACTION_COORDINATOR_FENCED (52).
	sarama.ErrProducerFenced:               classFenced,
	sarama.ErrInvalidProducerEpoch:         classFenced,
	sarama.ErrInvalidTxnState:              classFenced,
	sarama.ErrInvalidProducerIDMapping:     classFenced,
	sarama.ErrTransactionCoordinatorFenced: classFenced,

	sarama.ErrMessageSizeTooLarge:    classTooLarge, // MESSAGE_TOO_LARGE (10)
	sarama.ErrMessageSetSizeTooLarge: classTooLarge, // RECORD_LIST_TOO_LARGE (18)
}

// classOf returns the class of the first broker error code in err's chain
// (0 when there is none or it is not in the table).
func classOf(err error) errClass {
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return 0
	}
	return kafkaErrors[kerr]
}

// transient reports whether a failed group session (Consume) is worth
// joining again: the coordinator moved or is loading, a rebalance raced the
// join, a leader moved, a broker was unreachable (network errors,
// ErrOutOfBrokers, no coordinator yet: no broker error code at all).
// Anything the broker refuses for good (authorization, invalid session
// timeout, unknown topic, unsupported version) and configuration errors are
// not.
func transient(err error) bool {
	var cerr sarama.ConfigurationError
	if errors.As(err, &cerr) {
		return false
	}
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return true
	}
	switch kafkaErrors[kerr] {
	case classCoordinator, classMembership, classLeadership:
		return true
	}
	return false
}

// retriable reports whether a commit or offset fetch failed for a reason
// that another attempt (after finding the coordinator again) may fix. A
// member that lost the partition (classMembership) is final: the next owner
// resumes from the last accepted commit. Errors without a broker code are
// connection errors (retried) unless the client is closed.
func retriable(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		return kafkaErrors[kerr] == classCoordinator
	}
	return !errors.Is(err, sarama.ErrClosedClient)
}

// IsFenced reports whether err (or an error it wraps) says that a newer
// producer instance owns the transactional id, so this one must stop
// producing and never retry (the fenced codes of the adapter's error table:
// 47, 48, 49, 52, 90). It looks through %w wrapping, errors.Join,
// sarama.ProducerError and sarama.ProducerErrors (fenced when any of its
// messages failed so). A nil err is not fenced.
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
	return anyCode(err, classFenced)
}

// tooLarge reports whether a produce failed because a message is larger
// than the broker (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE) or the
// producer's own Producer.MaxMessageBytes check (a ConfigurationError that
// sarama does not type otherwise) accepts.
func tooLarge(err error) bool {
	var cerr sarama.ConfigurationError
	if errors.As(err, &cerr) && strings.Contains(string(cerr), "MaxMessageBytes") {
		return true
	}
	return anyCode(err, classTooLarge)
}

// anyCode reports whether any broker error code in err's tree (errors.Is
// walks joins and wraps) has class c.
func anyCode(err error, c errClass) bool {
	for code, class := range kafkaErrors {
		if class == c && errors.Is(err, code) {
			return true
		}
	}
	return false
}
