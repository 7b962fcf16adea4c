package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// CommitError is a commit the broker refused or that could not be sent.
type CommitError struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("kafka: commit group %q %s/%d@%d: %v", e.Group, e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *CommitError) Unwrap() error { return e.Err }

// member says in whose name a commit is made. A group member commits with
// its session's generation and member id, read at every commit (a
// cooperative rebalance changes the generation under a running claim); the
// broker then refuses a commit from a member that no longer owns the
// partition. A nil member commits as a non-member (generation -1), which
// brokers accept only for a group with no members (tools, tests).
type member interface {
	GenerationID() int32
	MemberID() string
}

// offsets commits and fetches a group's offsets through a dedicated client:
// no fetch long-poll shares its connections, so a commit is answered as soon
// as the coordinator has written it. Safe for concurrent use.
type offsets struct {
	client  sarama.Client
	group   string
	retries int
	backoff time.Duration
}

func newOffsets(client sarama.Client, group string) *offsets {
	cfg := client.Config()
	return &offsets{
		client:  client,
		group:   group,
		retries: max(cfg.Metadata.Retry.Max, 3),
		backoff: max(cfg.Metadata.Retry.Backoff, 10*time.Millisecond),
	}
}

// retry runs op until it succeeds, fails with a final error, exhausts the
// attempts or ctx ends. Between attempts it forgets the coordinator, so the
// next one asks the cluster where the group lives now.
func (o *offsets) retry(ctx context.Context, op func(*sarama.Broker) error) error {
	var err error
	for attempt := 0; ; attempt++ {
		var coord *sarama.Broker
		if coord, err = o.client.Coordinator(o.group); err == nil {
			if err = op(coord); err == nil {
				return nil
			}
		}
		if !retriable(err) || attempt >= o.retries {
			return err
		}
		_ = o.client.RefreshCoordinator(o.group)
		t := time.NewTimer(o.backoff << min(attempt, 6))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// commit commits offset with metadata for topic/partition and returns once
// the coordinator acknowledged it, or with its error. Unlike sarama's
// session MarkOffset+Commit, the result is known, and a new metadata at the
// same offset is stored too.
func (o *offsets) commit(ctx context.Context, m member, topic string, partition int32, offset int64, metadata string) error {
	err := o.retry(ctx, func(coord *sarama.Broker) error {
		req := sarama.NewOffsetCommitRequest(o.client.Config(), o.group)
		if m != nil {
			req.ConsumerGroupGeneration = m.GenerationID()
			req.ConsumerID = m.MemberID()
			if id := o.client.Config().Consumer.Group.InstanceId; id != "" && req.Version >= 7 {
				req.GroupInstanceId = &id
			}
		}
		// Leader epoch -1: unknown (the record's epoch is not tracked).
		req.AddBlockWithLeaderEpoch(topic, partition, offset, -1, 0, metadata)
		resp, err := coord.CommitOffset(req)
		if err != nil {
			_ = coord.Close() // a broken connection is reopened by the next request
			return err
		}
		kerr, ok := resp.Errors[topic][partition]
		if !ok {
			return fmt.Errorf("commit response names no result for %s/%d", topic, partition)
		}
		if kerr != sarama.ErrNoError {
			return kerr
		}
		return nil
	})
	if err != nil {
		return &CommitError{Group: o.group, Topic: topic, Partition: partition, Offset: offset, Err: err}
	}
	return nil
}

// errStableVersion: RequireStable (KIP-447) needs OffsetFetch v7.
var errStableVersion = errors.New("kafka: fetching stable offsets (RequireStable) needs protocol version 2.5 or later")

// committed is a partition's committed offset (-1: none) and its metadata.
type committed struct {
	offset   int64
	metadata string
}

// fetch returns the committed offsets and metadata of the partitions; when
// the client reads read_committed (and speaks 2.5), stable ones
// (fetchStable): a partition's start then waits, in its session, until a
// previous owner's open transaction holding offsets of the group has ended
// — committed, or aborted by the transaction coordinator at its timeout —
// instead of failing the session, which would make the member join the
// group again (a rebalance of every member) until then.
func (o *offsets) fetch(ctx context.Context, topic string, partitions []int32) (map[int32]committed, error) {
	if cfg := o.client.Config(); cfg.Consumer.IsolationLevel == sarama.ReadCommitted && cfg.Version.IsAtLeast(sarama.V2_5_0_0) {
		return o.fetchStable(ctx, topic, partitions)
	}
	return o.fetchOffsets(ctx, topic, partitions, false)
}

// fetchStable is fetch with RequireStable whatever the client's isolation
// level, retried (UNSTABLE_OFFSET_COMMIT while a transaction's offsets are
// pending, a moving coordinator, a lost connection) with a growing pause
// until it succeeds, fails for good or ctx ends.
func (o *offsets) fetchStable(ctx context.Context, topic string, partitions []int32) (map[int32]committed, error) {
	for attempt := 0; ; attempt++ {
		out, err := o.fetchOffsets(ctx, topic, partitions, true)
		if err == nil || errors.Is(err, errStableVersion) || !retriable(err) || ctx.Err() != nil {
			return out, err
		}
		t := time.NewTimer(min(o.backoff<<min(attempt, 6), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// fetchOffsets is fetch; stable: with RequireStable whatever the isolation
// level (an error when the client's protocol version has no RequireStable).
func (o *offsets) fetchOffsets(ctx context.Context, topic string, partitions []int32, stable bool) (map[int32]committed, error) {
	out := make(map[int32]committed, len(partitions))
	if len(partitions) == 0 {
		return out, nil
	}
	if stable && !o.client.Config().Version.IsAtLeast(sarama.V2_5_0_0) {
		return nil, errStableVersion
	}
	err := o.retry(ctx, func(coord *sarama.Broker) error {
		cfg := o.client.Config()
		req := sarama.NewOffsetFetchRequest(cfg.Version, o.group, map[string][]int32{topic: partitions})
		// A read_committed consumer must not start below offsets that a
		// transaction committed but has not finished marking (KIP-447).
		req.RequireStable = (stable || cfg.Consumer.IsolationLevel == sarama.ReadCommitted) && req.Version >= 7
		resp, err := coord.FetchOffset(req)
		if err != nil {
			_ = coord.Close()
			return err
		}
		gerr := resp.GroupError()
		if gerr == sarama.ErrGroupIDNotFound {
			// kfake's answer for a group that never committed; Kafka
			// answers offset -1 for each partition.
			for _, p := range partitions {
				out[p] = committed{offset: -1}
			}
			return nil
		}
		if gerr != sarama.ErrNoError {
			return gerr
		}
		for _, p := range partitions {
			b := resp.GetBlock(topic, p)
			if b == nil {
				return fmt.Errorf("offset fetch response names no result for %s/%d", topic, p)
			}
			if b.Err != sarama.ErrNoError {
				return b.Err
			}
			out[p] = committed{offset: b.Offset, metadata: b.Metadata}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kafka: fetch committed offsets of group %q %s%v: %w", o.group, topic, partitions, err)
	}
	return out, nil
}

// partitionCommitter is a chain.Committer for one claimed partition.
// It reports since when a commit has been waiting for the coordinator
// (chain.CommitPending), for the health check.
type partitionCommitter struct {
	o         *offsets
	m         member
	topic     string
	partition int32
	pendingCommits
}

func (c *partitionCommitter) Commit(ctx context.Context, offset int64, metadata string) error {
	c.begin()
	err := c.o.commit(ctx, c.m, c.topic, c.partition, offset, metadata)
	c.end(err)
	return err
}
