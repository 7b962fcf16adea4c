package main

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// readTopic returns every record of topic from each partition's log start
// to its high watermark (readCommitted: its last stable offset, aborted
// records left out) at the time of the call, partition by partition in
// offset order (kfetch.ReadTopic), as the reference check reads them. A
// read_committed read first waits until no partition has an open
// transaction: the writer's last transaction's markers land after its
// commit returned.
func readTopic(ctx context.Context, client sarama.Client, topic string, readCommitted bool) ([]reference.Written, error) {
	if readCommitted {
		if err := kfetch.WaitStable(ctx, client, topic); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
	}
	byPartition, err := kfetch.ReadTopic(ctx, client, topic, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	return reference.FromKafka(byPartition), nil
}
