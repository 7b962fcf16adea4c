package kfetch

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

func batch(first int64, n int, pid int64, txn bool) *sarama.Records {
	b := &sarama.RecordBatch{FirstOffset: first, LastOffsetDelta: int32(n - 1), ProducerID: pid, IsTransactional: txn,
		FirstTimestamp: time.Unix(100, 0)}
	for i := range n {
		b.Records = append(b.Records, &sarama.Record{OffsetDelta: int64(i), TimestampDelta: time.Duration(i) * time.Second})
	}
	return &sarama.Records{RecordBatch: b}
}

func marker(offset, pid int64, commit bool) *sarama.Records {
	key := make([]byte, 4)
	if commit {
		binary.BigEndian.PutUint16(key[2:], 1)
	}
	return &sarama.Records{RecordBatch: &sarama.RecordBatch{FirstOffset: offset, ProducerID: pid, IsTransactional: true,
		Control: true, Records: []*sarama.Record{{Key: key}}}}
}

// log: 0-2 plain; 3-4 txn of producer 7, aborted at 5; 6-7 txn of 8,
// committed at 8; 9-10 plain; then a partial batch at 11.
func block() *sarama.FetchResponseBlock {
	partial := batch(11, 2, -1, false)
	partial.RecordBatch.PartialTrailingRecord = true
	return &sarama.FetchResponseBlock{
		HighWaterMarkOffset: 13, LastStableOffset: 13,
		AbortedTransactions: []*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 3}},
		RecordsSet: []*sarama.Records{batch(0, 3, -1, false), batch(3, 2, 7, true), marker(5, 7, false),
			batch(6, 2, 8, true), marker(8, 8, true), batch(9, 2, -1, false), partial},
	}
}

func read(t *testing.T, f *Filter, offset, end int64) ([]int64, int64) {
	t.Helper()
	var got []int64
	next, err := f.Records(block(), offset, end, func(b *sarama.RecordBatch, r *sarama.Record) {
		got = append(got, Offset(b, r))
		require.Equal(t, time.Unix(100, 0).Add(time.Duration(Offset(b, r)-b.FirstOffset)*time.Second), Timestamp(b, r))
	})
	require.NoError(t, err)
	return got, next
}

// TestFilterDropsMarkersAndAbortedRecords: read_committed sees plain and
// committed records only, read_uncommitted sees the aborted ones too, and
// neither sees a marker; both continue after the last complete batch, never
// into the partial one.
func TestFilterDropsMarkersAndAbortedRecords(t *testing.T) {
	got, next := read(t, &Filter{ReadCommitted: true}, 0, math.MaxInt64)
	require.Equal(t, []int64{0, 1, 2, 6, 7, 9, 10}, got)
	require.Equal(t, int64(11), next)

	got, next = read(t, &Filter{}, 0, math.MaxInt64)
	require.Equal(t, []int64{0, 1, 2, 3, 4, 6, 7, 9, 10}, got)
	require.Equal(t, int64(11), next)
}

// TestFilterHonoursOffsetAndEnd: records below the requested offset (a
// batch starts where it starts) and at or past the end are not emitted.
func TestFilterHonoursOffsetAndEnd(t *testing.T) {
	got, next := read(t, &Filter{ReadCommitted: true}, 1, 7)
	require.Equal(t, []int64{1, 2, 6}, got)
	require.Equal(t, int64(11), next, "the position passes every complete batch of the response")
}

// TestFilterRefusesLegacyMessageSets: message format v0/v1 is an error,
// not a silent skip.
func TestFilterRefusesLegacyMessageSets(t *testing.T) {
	b := &sarama.FetchResponseBlock{RecordsSet: []*sarama.Records{{MsgSet: &sarama.MessageSet{
		Messages: []*sarama.MessageBlock{{Offset: 0, Msg: &sarama.Message{}}}}}}}
	_, err := (&Filter{}).Records(b, 0, math.MaxInt64, func(*sarama.RecordBatch, *sarama.Record) {})
	require.ErrorIs(t, err, ErrLegacyFormat)
}
