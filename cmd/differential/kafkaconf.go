package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// defaultKafkaVersion is the protocol version the CLI speaks unless told
// otherwise: accepted by the embedded broker and by Kafka 2.8 to 4.x, and
// enough for everything the engine uses.
const defaultKafkaVersion = "3.0.0"

// baseSarama is the sarama configuration every client of a command starts
// from. The Kafka adapter and producer copy it and override what their
// guarantees depend on.
func baseSarama(version sarama.KafkaVersion, maxRecordBytes int) *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = "differential"
	sc.Version = version
	sc.Net.DialTimeout = 10 * time.Second
	// Records up to the decoder's limit must reach it (and the dead-letter
	// topic) so it can reject them; the broker's own limit still applies.
	sc.Producer.MaxMessageBytes = max(sc.Producer.MaxMessageBytes, maxRecordBytes+64<<10)
	return sc
}

// parseKafkaVersion validates --kafka-version.
func parseKafkaVersion(s string) (sarama.KafkaVersion, error) {
	v, err := sarama.ParseKafkaVersion(s)
	if err != nil {
		return v, usagef("--kafka-version: %w", err)
	}
	if !v.IsAtLeast(sarama.V0_11_0_0) {
		return v, usagef("--kafka-version: %s is too old: headers and idempotent producers need 0.11.0 or later", s)
	}
	return v, nil
}

// topicRef is a topic a command needs, with the flag that named it.
type topicRef struct{ flag, topic string }

// checkTopics fails with one message naming every missing topic and its
// flag: differential never creates the topics it consumes or produces to.
// It returns each topic's partition count.
func checkTopics(client sarama.Client, brokers []string, refs []topicRef) (map[string]int, error) {
	counts := map[string]int{}
	var missing []string
	for _, r := range refs {
		if r.topic == "" {
			continue
		}
		parts, err := client.Partitions(r.topic)
		switch {
		case errors.Is(err, sarama.ErrUnknownTopicOrPartition) || (err == nil && len(parts) == 0):
			missing = append(missing, fmt.Sprintf("%q (--%s)", r.topic, r.flag))
		case err != nil:
			return nil, fmt.Errorf("metadata of topic %q (--%s) on brokers %v: %w", r.topic, r.flag, brokers, err)
		default:
			counts[r.topic] = len(parts)
		}
	}
	switch len(missing) {
	case 0:
		return counts, nil
	case 1:
		return nil, fmt.Errorf("topic %s does not exist on brokers %v; differential does not create topics, create it first (e.g. kafka-topics.sh --create --topic <name> --partitions <n> --bootstrap-server %s)",
			missing[0], brokers, brokers[0])
	}
	return nil, fmt.Errorf("topics %s do not exist on brokers %v; differential does not create topics, create them first (e.g. kafka-topics.sh --create --topic <name> --partitions <n> --bootstrap-server %s)",
		strings.Join(missing, ", "), brokers, brokers[0])
}
