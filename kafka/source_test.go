package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

func headerMessage(o int64, n int) *sarama.ConsumerMessage {
	m := &sarama.ConsumerMessage{Topic: "t", Partition: 3, Offset: o, Key: []byte("k"), Value: []byte("v")}
	for i := range n {
		m.Headers = append(m.Headers, &sarama.RecordHeader{Key: fmt.Appendf(nil, "h%d", i), Value: fmt.Appendf(nil, "%d/%d", o, i)})
	}
	return m
}

// The arena gives every record its own headers, in order, nil entries
// skipped, none as nil; appending to one record's headers must not write
// into the next record's (each slice is capped at its length).
func TestHeaderArenaRecords(t *testing.T) {
	var a headerArena
	msgs := make([]*sarama.ConsumerMessage, 0, 2*headerBlock)
	for o := range int64(2 * headerBlock) { // crosses arena blocks
		msgs = append(msgs, headerMessage(o, int(o%3)))
	}
	msgs[7].Headers = append(msgs[7].Headers, nil)
	msgs = append(msgs, headerMessage(int64(len(msgs)), headerBlock+1)) // larger than a block
	recs := make([]chain.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = a.record(m)
	}
	for i, m := range msgs {
		require.Equal(t, Record(m), recs[i], "record %d", i)
	}
	require.Nil(t, recs[0].Headers, "a record without headers has nil headers")
	for i := range recs {
		if len(recs[i].Headers) == 0 {
			continue
		}
		_ = append(recs[i].Headers, chain.Header{Key: []byte("clobber")})
	}
	for i, m := range msgs {
		require.Equal(t, Record(m), recs[i], "record %d after appends to its neighbours", i)
	}
}

// drain takes the headers of a batch from the arena: far fewer allocations
// than one per record with headers.
func TestDrainHeaderAllocations(t *testing.T) {
	const n = 256
	msgs := make([]*sarama.ConsumerMessage, n)
	for i := range msgs {
		msgs[i] = headerMessage(int64(i), 2)
	}
	ch := make(chan *sarama.ConsumerMessage, n)
	var a headerArena
	dst := make([]chain.Record, 0, n)
	allocs := testing.AllocsPerRun(20, func() {
		for _, m := range msgs {
			ch <- m
		}
		var err error
		dst, err = drain(context.Background(), ch, dst[:0], n, nil, &a)
		if err != nil || len(dst) != n {
			t.Fatalf("drain: %d records, %v", len(dst), err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0, "allocations per batch of %d records with headers", n)
}
