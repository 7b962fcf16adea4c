package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// sizeProbeAfter is how long a Transactor trusts what it learned of a
// topic's size limit: a learned limit is then forgotten, and the next
// message at or above it is sent alone again (a probe), so that raising a
// topic's max.message.bytes takes effect without a restart. A probe the
// brokers refuse costs one aborted cycle. A variable for tests.
var sizeProbeAfter = 5 * time.Minute

// topicSizes is what a Transactor knows of the size limit of one topic it
// sends outputs or dead letters to. The brokers weigh a batch against
// max.message.bytes, and a refusal fails every message of the batch: it
// says nothing of a message that fits alone. So a limit is learned only
// from a message refused while it was the topic's only message in flight
// (sent alone), and after a refused batch (suspect) every message larger
// than any the topic has acknowledged since is sent alone until the limit
// is known, each waiting for the topic's earlier messages and holding back
// the later ones.
type topicSizes struct {
	mu sync.Mutex
	// accepted is the largest message acknowledged since the last
	// refusal: it fits alone (its batch did).
	accepted int
	// limit is the size of the smallest message refused alone, learned
	// at limitAt; 0 when none is known.
	limit   int
	limitAt time.Time
	// suspect is when a batch was last refused or a limit forgotten;
	// messages larger than accepted are sent alone until sizeProbeAfter
	// after it.
	suspect time.Time
	// inflight counts the messages handed to sarama and not resolved;
	// alone says one of them is sent alone. changed is closed when either
	// goes down.
	inflight int
	alone    bool
	changed  chan struct{}
}

// sizes returns topic's sizes, creating them.
func (t *Transactor) sizes(topic string) *topicSizes {
	if ts, ok := t.topics.Load(topic); ok {
		return ts.(*topicSizes)
	}
	ts, _ := t.topics.LoadOrStore(topic, &topicSizes{changed: make(chan struct{})})
	return ts.(*topicSizes)
}

// check returns the learned limit that refuses a message of size bytes
// (0: none does), and whether the message must be sent alone. A limit
// learned sizeProbeAfter ago is forgotten first: the message is then sent
// alone, as a probe.
func (ts *topicSizes) check(size int, now time.Time) (limit int, alone bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.limit > 0 && now.Sub(ts.limitAt) >= sizeProbeAfter {
		ts.limit, ts.suspect = 0, now
	}
	if ts.limit > 0 && size >= ts.limit {
		return ts.limit, false
	}
	return 0, size > ts.accepted && now.Sub(ts.suspect) < sizeProbeAfter
}

// acquire waits until a message may be handed to sarama: no message sent
// alone is in flight and, for one sent alone, no other message either.
func (ts *topicSizes) acquire(ctx context.Context, alone bool) error {
	for {
		ts.mu.Lock()
		if !ts.alone && (!alone || ts.inflight == 0) {
			ts.inflight++
			ts.alone = alone
			ts.mu.Unlock()
			return nil
		}
		ch := ts.changed
		ts.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release resolves a message acquire let through: acknowledged (err nil)
// or failed with err. A message refused alone for its size teaches the
// limit; one refused in a batch makes the topic suspect.
func (ts *topicSizes) release(alone bool, size int, err error, now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case err == nil:
		ts.accepted = max(ts.accepted, size)
	case tooLarge(err) && alone:
		if ts.limit == 0 || size < ts.limit {
			ts.limit = size
		}
		ts.limitAt = now
		if ts.accepted >= size {
			ts.accepted = 0 // the limit went down
		}
	case tooLarge(err):
		// Any message of the batch may be the one too large, and what
		// was accepted before may no longer fit.
		ts.accepted, ts.suspect = 0, now
	}
	ts.inflight--
	if alone {
		ts.alone = false
	}
	if alone || ts.inflight == 0 {
		close(ts.changed)
		ts.changed = make(chan struct{})
	}
}

// txnSend is the Metadata of an output or dead letter the Transactor
// sends: its call's acknowledgements and what its resolution teaches the
// topic's sizes.
type txnSend struct {
	g     *ackGroup
	ts    *topicSizes
	size  int
	alone bool
}

func (w *txnSend) resolve(err error, now time.Time) {
	w.ts.release(w.alone, w.size, err, now)
}

// messageSize is what a Transactor weighs a message by against limits.
func messageSize(pm *sarama.ProducerMessage) int { return pm.ByteSize(2) }
