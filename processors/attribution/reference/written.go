package reference

import (
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
)

// FromKafka flattens records read back by partition (kfetch.ReadTopic,
// testbroker's ReadAll) into Written: partition by partition, each in the
// order given (offset order).
func FromKafka(byPartition map[int32][]*sarama.ConsumerMessage) []Written {
	var out []Written
	for _, p := range slices.Sorted(maps.Keys(byPartition)) {
		for _, m := range byPartition[p] {
			w := Written{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				if h != nil {
					w.Headers = append(w.Headers, chain.Header{Key: h.Key, Value: h.Value})
				}
			}
			out = append(out, w)
		}
	}
	return out
}

// FromMessages turns messages as a producer was handed them (chaintest's
// Outputs) into Written as if read back from one partition: partition 0,
// offsets 0, 1, … in the order given.
func FromMessages(msgs []chain.Message) []Written {
	out := make([]Written, len(msgs))
	for i, m := range msgs {
		out[i] = Written{Offset: int64(i), Key: m.Key, Value: m.Value, Headers: m.Headers}
	}
	return out
}
