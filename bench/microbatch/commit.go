package microbatch

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/IBM/sarama"
)

// committer commits a session's offsets in the background on the
// baseline's commit client (AsyncCommit), as the chain commits on a client
// of its own: the batch loop offers each batch's offsets and goes on; one
// goroutine sends them, and offers made while a commit is in flight are
// merged into the next one (the latest offset per partition). The commit
// carries the session's generation and member id, so the coordinator
// refuses it once the session has ended.
type committer struct {
	m    *Baseline
	sess sarama.ConsumerGroupSession

	mu      sync.Mutex
	pending map[int32]int64
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	lastErr error
}

func newCommitter(m *Baseline, sess sarama.ConsumerGroupSession) *committer {
	c := &committer{m: m, sess: sess, pending: map[int32]int64{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

// offer hands offsets over for the next commit; it never waits.
func (c *committer) offer(offs map[int32]int64) {
	c.mu.Lock()
	for p, o := range offs {
		c.pending[p] = max(c.pending[p], o)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close commits what is pending, stops the loop and returns the last
// commit's error.
func (c *committer) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
	return c.lastErr
}

func (c *committer) loop() {
	defer close(c.done)
	for range c.wake {
		c.mu.Lock()
		offs, closed := c.pending, c.closed
		c.pending = map[int32]int64{}
		c.mu.Unlock()
		if len(offs) > 0 {
			err := c.commit(offs)
			c.lastErr = err
			if err != nil {
				c.m.cfg.Logger.Warn("micro-batch commit failed; retried with the next batch", "err", err)
				c.mu.Lock()
				for p, o := range offs {
					c.pending[p] = max(c.pending[p], o)
				}
				c.mu.Unlock()
			}
		}
		if closed {
			return
		}
	}
}

// commit sends one OffsetCommit with every partition's offset.
func (c *committer) commit(offs map[int32]int64) error {
	client := c.m.commitClient
	coord, err := client.Coordinator(c.m.cfg.Group)
	if err != nil {
		return fmt.Errorf("microbatch: coordinator: %w", err)
	}
	req := sarama.NewOffsetCommitRequest(client.Config(), c.m.cfg.Group)
	req.ConsumerGroupGeneration = c.sess.GenerationID()
	req.ConsumerID = c.sess.MemberID()
	for _, p := range slices.Sorted(maps.Keys(offs)) {
		req.AddBlockWithLeaderEpoch(c.m.cfg.Topic, p, offs[p], -1, 0, "")
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		_ = client.RefreshCoordinator(c.m.cfg.Group)
		return fmt.Errorf("microbatch: commit: %w", err)
	}
	var errs []error
	for p := range offs {
		kerr, ok := resp.Errors[c.m.cfg.Topic][p]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("partition %d: no result in the response", p))
		case kerr != sarama.ErrNoError:
			errs = append(errs, fmt.Errorf("partition %d: %w", p, kerr))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("microbatch: commit: %w", err)
	}
	c.m.commits.Add(1)
	if c.m.cfg.Committed != nil {
		c.m.cfg.Committed(len(offs))
	}
	return nil
}
