package chaos

import (
	"slices"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// smallWorkload is a Kafka-free workload with the end markers the runner
// appends, split by partition.
func smallWorkload(t *testing.T) ([]workload.Record, [][]chain.Record, attribution.Config) {
	t.Helper()
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed, wc.MaxRecordBytes = 3000, 2, 200, 7, maxRecordBytes
	recs := workload.Generate(wc)
	recs = append(recs, endMarkers(recs, wc.Partitions, "in")...)
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = maxRecordBytes
	return recs, workload.Split(recs, wc.Partitions), cfg
}

// written is what a correct engine writes for inputs: the model's outputs
// (with their source headers) and dead letters (with theirs), as read back.
func written(inputs [][]chain.Record, cfg attribution.Config) (outs, dlq map[int32][]*sarama.ConsumerMessage) {
	outs, dlq = map[int32][]*sarama.ConsumerMessage{}, map[int32][]*sarama.ConsumerMessage{}
	for p, recs := range inputs {
		res := reference.Run(recs, cfg)
		for _, o := range slices.Concat(res.Installs, res.Purchases) {
			outs[0] = append(outs[0], &sarama.ConsumerMessage{Partition: 0, Offset: int64(len(outs[0])), Key: o.Key, Value: o.Value,
				Headers: []*sarama.RecordHeader{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(int32(p), o.Offset)}}})
		}
		for _, inv := range res.Invalid {
			r := recs[slices.IndexFunc(recs, func(r chain.Record) bool { return r.Offset == inv.Offset })]
			dlq[0] = append(dlq[0], &sarama.ConsumerMessage{Partition: 0, Offset: int64(len(dlq[0])), Key: r.Key, Value: r.Value,
				Headers: []*sarama.RecordHeader{
					{Key: []byte(chain.HeaderDLQPartition), Value: []byte(strconv.Itoa(p))},
					{Key: []byte(chain.HeaderDLQOffset), Value: []byte(strconv.FormatInt(inv.Offset, 10))},
				}})
		}
	}
	// All in one output partition, each stage's outputs in source offset
	// order, as StageOrder requires.
	return outs, dlq
}

// TestReferenceCheckAppliesTheGuarantee: what the suite's Checker accepts
// under each guarantee — exact output always, an identical repeat only at
// least once, a changed repeat or a lost output never.
func TestReferenceCheckAppliesTheGuarantee(t *testing.T) {
	_, inputs, cfg := smallWorkload(t)
	outs, dlq := written(inputs, cfg)
	require.Greater(t, len(outs[0]), 100)
	require.NotEmpty(t, dlq[0])

	for _, g := range []Guarantee{AtLeastOnce, ExactlyOnce} {
		v := ReferenceCheck(inputs, cfg, outs, dlq, g)
		assert.True(t, v.OK, "exact output under %s: %s", g, v.Summary)
		assert.Equal(t, len(outs[0]), v.Outputs)
		assert.Equal(t, len(dlq[0]), v.DeadLetters)
	}

	repeat := func(change bool) map[int32][]*sarama.ConsumerMessage {
		ms := slices.Clone(outs[0])
		again := *ms[10]
		if change {
			again.Value = append(slices.Clip(again.Value), ' ')
		}
		again.Offset = int64(len(ms))
		return map[int32][]*sarama.ConsumerMessage{0: append(ms, &again)}
	}
	v := ReferenceCheck(inputs, cfg, repeat(false), dlq, AtLeastOnce)
	assert.True(t, v.OK, v.Summary)
	assert.Equal(t, 1, v.IdenticalDuplicates)
	v = ReferenceCheck(inputs, cfg, repeat(false), dlq, ExactlyOnce)
	assert.False(t, v.OK, "exactly-once accepts no repeat")
	v = ReferenceCheck(inputs, cfg, repeat(true), dlq, AtLeastOnce)
	assert.False(t, v.OK, "a changed repeat is never accepted")
	assert.Equal(t, 1, v.ConflictingDuplicates)

	lost := map[int32][]*sarama.ConsumerMessage{0: slices.Delete(slices.Clone(outs[0]), 10, 11)}
	v = ReferenceCheck(inputs, cfg, lost, dlq, AtLeastOnce)
	assert.False(t, v.OK)
	assert.Equal(t, 1, v.Missing)
}

// TestEndMarkersChangeNoOutput: each partition's end marker is a valid
// click, later than every valid event, last in its partition, and the
// model's outputs and dead letters for the records before it are the same
// with and without it.
func TestEndMarkersChangeNoOutput(t *testing.T) {
	recs, inputs, cfg := smallWorkload(t)
	markers := recs[len(recs)-len(inputs):]
	for p, part := range inputs {
		m := part[len(part)-1]
		require.Equal(t, markers[p].Record, m, "partition %d ends with its marker", p)
		ev, err := reference.Parse(&m, cfg)
		require.NoError(t, err, "the marker is valid")
		assert.Equal(t, "click", ev.Type)

		without := reference.Run(part[:len(part)-1], cfg)
		with := reference.Run(part, cfg)
		assert.True(t, ev.Time.After(without.StreamTime), "the marker is later than every event")
		assert.Equal(t, without.Installs, with.Installs)
		assert.Equal(t, without.Purchases, with.Purchases)
		assert.Equal(t, without.Invalid, with.Invalid)
		assert.LessOrEqual(t, ev.Time.Sub(m.Timestamp), cfg.MaxClockSkew, "within the clock-skew rule")
	}
}
