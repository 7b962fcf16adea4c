package differential

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// Config is what Run needs to know. Brokers, Topic and Group are required.
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// Topic is the input topic; it must exist.
	Topic string
	// Group is the consumer group id. Members of one group share the
	// topic's partitions.
	Group string
	// Output is the topic of the outputs whose chain.Message names none.
	// Empty: such an output is an error that stops its partition.
	Output string
	// DeadLetters is the topic of the records the decoder refuses and of
	// those a handler fails permanently (chain.Permanent), each with the
	// reason in its headers. Empty: they are only logged and counted.
	DeadLetters string
	// StateDir is the Pebble directory of the stages' state. Empty: the
	// state is kept in memory and lost when the process stops (tests,
	// demos); a partition that moves to another member starts with empty
	// state unless Changelog is set.
	StateDir string
	// Changelog writes every state change to a compacted topic (created if
	// missing, with the input's partition count), so a partition that moves
	// to another member or a machine that loses its disk restores its state
	// from it.
	Changelog bool
	// ExactlyOnce makes every output, dead letter and state change part of
	// a Kafka transaction that also commits the input offsets: readers with
	// read_committed see each output once, also after a crash. It turns
	// Changelog on (the local state is then a cache of the changelog) and
	// needs a cluster that runs transactions. Default: at-least-once (a
	// crash repeats the outputs since the last commit, byte for byte).
	ExactlyOnce bool
	// Logger receives the engine's logs. Default: discard.
	Logger *slog.Logger
	// Kafka is the base of the consumer group's configuration (security,
	// strategy, timeouts); Brokers, Topic, Group and Logger above override
	// its fields.
	Kafka kafka.Config
	// Options are further chain options (chain.WithCommitInterval,
	// chain.WithIdleTimeout, chain.WithObserver, ...); they apply after the
	// ones Run derives from the fields above.
	Options []chain.Option
}

// Handler processes one event: it reads and writes its stage's state with
// pc.State() and emits outputs with pc.Emit. An error stops the partition
// unless it is chain.Permanent (the record goes to the dead-letter topic)
// or the chain's retry policy retries it.
type Handler func(ctx context.Context, pc *chain.Context, e *chain.Event) error

// On is the stage named typ that processes the events of type typ, in
// offset order per partition (see chain.Stage for key-parallel stages).
func On(typ string, h Handler) chain.Stage {
	return chain.Stage{
		Name:      typ,
		Filter:    func(e *chain.Event) bool { return e.Type == typ },
		Processor: chain.ProcessorFunc(h),
	}
}

// TypePrefix is a decoder for values of the form "<type><sep><rest>": the
// type is the text before the first sep, the event time the record's Kafka
// timestamp. A value without sep is refused (a dead letter).
func TypePrefix(sep string) chain.Decoder {
	return chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, _, ok := strings.Cut(string(r.Value), sep)
		if !ok || typ == "" {
			return chain.Decoded{}, fmt.Errorf("value %.40q has no type before %q", r.Value, sep)
		}
		return chain.Decoded{Type: typ, Time: r.Timestamp}, nil
	})
}

// Run runs the stages over cfg.Topic as a member of cfg.Group until ctx
// ends, then drains every partition, makes its final commit and returns
// nil; an error stops it earlier (a partition's fatal error, a broker that
// cannot be reached at start, a configuration Run refuses).
func Run(ctx context.Context, cfg Config, decode chain.Decoder, stages ...chain.Stage) (err error) {
	if err := cfg.check(decode, stages); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			err = errors.Join(err, closers[i]())
		}
	}()

	var st chain.Store
	instance := ""
	if cfg.StateDir == "" {
		m := store.NewMemory()
		st, closers = m, append(closers, m.Close)
		instance, err = randomInstance()
		if err != nil {
			return err
		}
	} else {
		db, err := store.OpenPebble(cfg.StateDir, store.WithLogger(log))
		if err != nil {
			return fmt.Errorf("differential: state directory: %w", err)
		}
		st, closers = db, append(closers, db.Close)
		if instance, err = db.InstanceID(); err != nil {
			return fmt.Errorf("differential: state directory %s: %w", cfg.StateDir, err)
		}
	}
	opts := []chain.Option{chain.WithStore(st), chain.WithLogger(log)}
	if cfg.Output != "" {
		opts = append(opts, chain.WithOutputTopic(cfg.Output))
	}
	if cfg.DeadLetters != "" {
		opts = append(opts, chain.WithDLQTopic(cfg.DeadLetters))
	}
	base := cfg.Kafka.Sarama
	var cl *kafka.Changelog
	if cfg.Changelog || cfg.ExactlyOnce {
		cl, err = kafka.NewChangelog(ctx, kafka.ChangelogConfig{
			Brokers: cfg.Brokers, InputTopic: cfg.Topic, Group: cfg.Group,
			Sarama: base, Security: cfg.Kafka.Security, Logger: log, Registry: cfg.Kafka.Registry,
		})
		if err != nil {
			return err
		}
		closers = append(closers, cl.Close)
		opts = append(opts, chain.WithChangelog(cl))
	}
	if cfg.ExactlyOnce {
		tx, err := kafka.NewTransactor(kafka.TransactorConfig{
			Brokers: cfg.Brokers, TransactionalID: kafka.TransactionalID(cfg.Group, instance), Changelog: cl,
			Sarama: base, Security: cfg.Kafka.Security, Logger: log, Registry: cfg.Kafka.Registry,
		})
		if err != nil {
			return err
		}
		closers = append(closers, tx.Close)
		opts = append(opts, chain.WithExactlyOnce(tx))
	} else {
		// Its own client: a produce never queues behind the consumer's
		// fetch long-poll on a shared connection.
		p, err := kafka.NewProducer(kafka.ProducerConfig{
			Brokers: cfg.Brokers, Sarama: base, Security: cfg.Kafka.Security, Logger: log, Registry: cfg.Kafka.Registry,
		})
		if err != nil {
			return err
		}
		closers = append(closers, p.Close)
		opts = append(opts, chain.WithProducer(p))
	}
	ch, err := chain.New(stages, decode, append(opts, cfg.Options...)...)
	if err != nil {
		return err
	}
	kc := cfg.Kafka
	kc.Brokers, kc.Topic, kc.Group, kc.Logger = cfg.Brokers, cfg.Topic, cfg.Group, log
	return kafka.Run(ctx, ch, kc)
}

func (cfg *Config) check(decode chain.Decoder, stages []chain.Stage) error {
	var missing []string
	if len(cfg.Brokers) == 0 {
		missing = append(missing, "Brokers")
	}
	if cfg.Topic == "" {
		missing = append(missing, "Topic")
	}
	if cfg.Group == "" {
		missing = append(missing, "Group")
	}
	if decode == nil {
		missing = append(missing, "a decoder (TypePrefix, or a chain.Decoder)")
	}
	if len(stages) == 0 {
		missing = append(missing, "a stage (On)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("differential: Run needs %s", strings.Join(missing, ", "))
	}
	return nil
}

// randomInstance names a process without a state directory for its
// transactional id: unique, so two such processes never fence each other.
func randomInstance() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("differential: instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
