package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// rawConsumer is the ceiling: a plain sarama consumer group over the input
// (its own client, the same base configuration as the designs), reading
// every partition and doing nothing with the records. It checks that every
// offset arrives exactly once, in order.
type rawConsumer struct {
	addrs  []string
	sarama *sarama.Config
	topic  string
	group  string
	prog   *progress
	ready  func(claimed int)

	mu  sync.Mutex
	err error
}

func (r *rawConsumer) run(ctx context.Context) error {
	cfg := *r.sarama
	cfg.ClientID = "differential-bench-raw"
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(r.addrs, r.group, &cfg)
	if err != nil {
		return fmt.Errorf("raw: consumer group: %w", err)
	}
	var logged sync.WaitGroup
	logged.Go(func() {
		for range group.Errors() {
		}
	})
	defer func() {
		_ = group.Close()
		logged.Wait()
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{r.topic}, r); err != nil && errors.Is(err, sarama.ErrClosedConsumerGroup) {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *rawConsumer) Setup(sess sarama.ConsumerGroupSession) error {
	if r.ready != nil {
		r.ready(len(sess.Claims()[r.topic]))
	}
	return nil
}

func (r *rawConsumer) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (r *rawConsumer) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := claim.Partition()
	next := int64(-1)
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			r.prog.consumed()
			if next >= 0 && m.Offset != next {
				r.mu.Lock()
				if r.err == nil {
					r.err = fmt.Errorf("raw: partition %d: offset %d after %d (lost or repeated records)", p, m.Offset, next-1)
				}
				r.mu.Unlock()
			}
			next = m.Offset + 1
			r.prog.advance(p, next)
		case <-sess.Context().Done():
			return nil
		}
	}
}
