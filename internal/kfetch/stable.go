package kfetch

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// stablePoll is how often WaitStable asks the partition leaders again.
const stablePoll = 50 * time.Millisecond

// WaitStable waits until no partition of topic has an open transaction: its
// last stable offset (the end of what a read_committed reader sees) equals
// its high watermark. A transaction's commit markers are written after
// EndTxn returns, and a crashed producer's transaction stays open until the
// transaction coordinator aborts it (transaction.timeout.ms), so a
// read_committed ReadTopic right after an exactly-once writer stopped may
// otherwise end short of its last transaction. It returns ctx's error, with
// the last offsets seen, if ctx ends first.
func WaitStable(ctx context.Context, client sarama.Client, topic string) error {
	ps, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("kfetch: partitions of %s: %w", topic, err)
	}
	for _, p := range ps {
		for {
			stable, high, err := Ends(client, topic, p)
			if err == nil && stable >= high {
				break
			}
			t := time.NewTimer(stablePoll)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				if err != nil {
					return fmt.Errorf("kfetch: %s/%d not stable: %w (%w)", topic, p, ctx.Err(), err)
				}
				return fmt.Errorf("kfetch: %s/%d not stable (last stable offset %d, high watermark %d): %w", topic, p, stable, high, ctx.Err())
			}
		}
	}
	return nil
}

// Ends returns a partition's last stable offset and high watermark, asked
// of its leader.
func Ends(client sarama.Client, topic string, p int32) (stable, high int64, err error) {
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, 0, err
	}
	get := func(level sarama.IsolationLevel) (int64, error) {
		req := sarama.NewOffsetRequest(client.Config().Version)
		req.IsolationLevel = level
		req.AddBlock(topic, p, sarama.OffsetNewest, 1)
		resp, err := leader.GetAvailableOffsets(req)
		if err != nil {
			return 0, err
		}
		blk := resp.GetBlock(topic, p)
		if blk == nil {
			return 0, sarama.ErrIncompleteResponse
		}
		if blk.Err != sarama.ErrNoError {
			return 0, blk.Err
		}
		if len(blk.Offsets) > 0 {
			return blk.Offsets[0], nil
		}
		return blk.Offset, nil
	}
	if stable, err = get(sarama.ReadCommitted); err != nil {
		return 0, 0, err
	}
	high, err = get(sarama.ReadUncommitted)
	return stable, high, err
}
