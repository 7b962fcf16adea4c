package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
)

type produceOptions struct {
	config         string
	brokers        []string
	topic          string
	records        int
	partitions     int
	seed           uint64
	maxRecordBytes int
	heavyKey       float64
	create         bool
	kafkaVersion   string
	sec            securityFlags
}

var produceSynopsis = `Writes a generated attribution workload (internal/workload: skewed users, late
clicks, duplicates, about 1% malformed records) to --topic. The same --seed,
--records and partition count always give the same records; each goes to the
partition sarama's default hash partitioner picks for its key (user_id).
Progress goes to stderr, the final count to stdout.

` + envHelp("DIFFERENTIAL_BROKERS") + `

The file may be run's: keys of run's settings are ignored.`

func defaultProduceOptions() produceOptions {
	return produceOptions{topic: "events", records: 100_000, seed: 1, maxRecordBytes: attribution.DefaultMaxRecordBytes, kafkaVersion: defaultKafkaVersion}
}

func (o *produceOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "YAML configuration `file`; keys are flag names")
	fs.Var(listValue{&o.brokers}, "brokers", "Kafka bootstrap brokers, `host:port[,host:port...]` (required)")
	fs.StringVar(&o.topic, "topic", o.topic, "`topic` to write to")
	fs.IntVar(&o.records, "records", o.records, "number of records")
	fs.IntVar(&o.partitions, "partitions", 0, "partition count the generator plans keys for; 0: the topic's (with --create: 8)")
	fs.Uint64Var(&o.seed, "seed", o.seed, "generator seed")
	fs.IntVar(&o.maxRecordBytes, "max-record-bytes", o.maxRecordBytes, "the generated \"oversized\" records are this +1 bytes; the default is run's, so a default run dead-letters them")
	fs.Float64Var(&o.heavyKey, "heavy-key", 0, "`share` of its partition's records given to one heavy key (the all-zeros advertising ID), in [0, 1)")
	fs.BoolVar(&o.create, "create", false, "create --topic with --partitions partitions if it does not exist")
	fs.StringVar(&o.kafkaVersion, "kafka-version", o.kafkaVersion, "Kafka protocol `version` to speak")
	o.sec.register(fs)
}

func produceCmd(ctx context.Context, args []string, e *env) error {
	o := defaultProduceOptions()
	fs := newFlagSet("produce", produceSynopsis, e)
	o.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	src, err := settle(fs, e, &o.config, flagNames(new(runOptions).register))
	if err != nil {
		return err
	}
	version, err := o.validate()
	if err != nil {
		return src.explain(err)
	}
	sec, err := o.sec.security()
	if err != nil {
		return src.explain(err)
	}
	if sec.TLS.InsecureSkipVerify {
		fmt.Fprintln(e.stderr, "differential produce: WARNING: "+insecureWarning)
	}
	sc, err := securedSarama(baseSarama(version, o.maxRecordBytes), sec)
	if err != nil {
		return err
	}
	parts, err := o.topicPartitions(sc, sec)
	if err != nil {
		return err
	}

	cfg := workload.DefaultConfig()
	cfg.Records, cfg.Partitions, cfg.Seed, cfg.Topic, cfg.MaxRecordBytes = o.records, parts, o.seed, o.topic, o.maxRecordBytes
	cfg.HeavyKeyShare = o.heavyKey
	recs := workload.Generate(cfg)
	fmt.Fprintf(e.stderr, "generated %s records for %d partitions (seed %d): %s\n", count(len(recs)), parts, o.seed, kindSummary(recs))
	res, err := workload.Write(ctx, workload.WriterConfig{Brokers: o.brokers, Sarama: sc, Topic: o.topic,
		Progress: produceProgress(e.stderr, len(recs))}, recs)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "produced %d records to %s (%d partitions) in %s (%s records/s)\n",
		res.Records, o.topic, parts, res.Took.Round(time.Millisecond), rate(float64(res.Records)/res.Took.Seconds()))
	return nil
}

func (o *produceOptions) validate() (sarama.KafkaVersion, error) {
	if err := checkBrokers("brokers", o.brokers); err != nil {
		return sarama.KafkaVersion{}, err
	}
	if err := checkTopic("topic", o.topic, true); err != nil {
		return sarama.KafkaVersion{}, err
	}
	switch {
	case o.records < 0:
		return sarama.KafkaVersion{}, usagef("--records must be >= 0, got %d", o.records)
	case o.partitions < 0:
		return sarama.KafkaVersion{}, usagef("--partitions must be >= 0, got %d", o.partitions)
	case o.maxRecordBytes <= 0:
		return sarama.KafkaVersion{}, usagef("--max-record-bytes must be > 0, got %d", o.maxRecordBytes)
	case o.heavyKey < 0 || o.heavyKey >= 1:
		return sarama.KafkaVersion{}, usagef("--heavy-key must be in [0, 1), got %v", o.heavyKey)
	}
	return parseKafkaVersion(o.kafkaVersion)
}

// topicPartitions returns the topic's partition count, creating the topic
// first with --create, and checks it against --partitions.
func (o *produceOptions) topicPartitions(sc *sarama.Config, sec kafka.Security) (int, error) {
	client, err := sarama.NewClient(o.brokers, sc)
	if err != nil {
		return 0, fmt.Errorf("connect to --brokers %v: %w", o.brokers, kafka.ExplainConnect(err, sec))
	}
	defer func() { _ = client.Close() }()
	parts, err := client.Partitions(o.topic)
	missing := errors.Is(err, sarama.ErrUnknownTopicOrPartition) || (err == nil && len(parts) == 0)
	switch {
	case missing && o.create:
		n := o.partitions
		if n == 0 {
			n = 8
		}
		return n, createTopic(client, o.topic, n)
	case missing:
		return 0, fmt.Errorf("topic %q (--topic) does not exist on brokers %v; create it, or pass --create to have produce create it (with --partitions partitions, default 8)", o.topic, o.brokers)
	case err != nil:
		return 0, fmt.Errorf("metadata of topic %q on brokers %v: %w", o.topic, o.brokers, err)
	case o.partitions != 0 && o.partitions != len(parts):
		return 0, fmt.Errorf("topic %q has %d partitions but --partitions is %d: the generator must plan keys for the topic's partition count", o.topic, len(parts), o.partitions)
	}
	return len(parts), nil
}

func createTopic(client sarama.Client, topic string, partitions int) error {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	// Not admin.Close: it would close the shared client, which the caller owns.
	// No retention limit: the generated events are dated weeks back, and
	// the default 7-day time retention would delete them (kadmin.NewTopic).
	err = admin.CreateTopic(topic, kadmin.NewTopic(int32(partitions)), false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	return nil
}

// produceProgress prints one line a second while records are written.
func produceProgress(w io.Writer, total int) func(int, time.Duration) {
	return func(acked int, elapsed time.Duration) {
		pct := 100.0
		if total > 0 {
			pct = 100 * float64(acked) / float64(total)
		}
		fmt.Fprintf(w, "produced %s/%s records (%.0f%%), %s records/s\n",
			count(acked), count(total), pct, rate(float64(acked)/elapsed.Seconds()))
	}
}
