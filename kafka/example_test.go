package kafka_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// ExampleRun runs a two-stage chain (orders -> payments) as a consumer
// group member over a topic, against an in-process broker
// (internal/embedded; give real brokers' addresses instead). The payment
// stage never runs ahead of the order stage, so it always finds the order.
// Run returns nil once its context ends and every partition has drained and
// made its final commit; here the context ends when the partition's last
// record is committed.
func ExampleRun() {
	cluster, err := embedded.Start(embedded.Topic("events", 1), embedded.Topic("paid", 1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()

	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	input := []chain.Message{
		{Topic: "events", Key: []byte("o-1"), Value: []byte("order:book")},
		{Topic: "events", Key: []byte("o-2"), Value: []byte("order:pen")},
		{Topic: "events", Key: []byte("o-1"), Value: []byte("payment:9.99")},
	}
	produced := make(chan error, 1)
	prod.Produce(context.Background(), input, func(err error) { produced <- err })
	if err := <-produced; err != nil {
		log.Fatal(err)
	}

	decode := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, _, _ := strings.Cut(string(r.Value), ":")
		return chain.Decoded{Type: typ, Time: r.Timestamp}, nil
	})
	byType := func(t string) func(*chain.Event) bool { return func(e *chain.Event) bool { return e.Type == t } }
	orders := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{})
	})
	payments := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		order, _, err := pc.State().Get(e.Key)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s paid for %s", e.Key, order)})
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ch, err := chain.New([]chain.Stage{
		{Name: "orders", Filter: byType("order"), Processor: orders},
		{Name: "payments", Filter: byType("payment"), Processor: payments},
	}, decode,
		chain.WithStore(store.NewMemory()), chain.WithProducer(prod), chain.WithOutputTopic("paid"),
		chain.WithIdleTimeout(10*time.Millisecond), chain.WithCommitInterval(10*time.Millisecond),
		chain.WithObserver(stopAt{end: int64(len(input)), stop: stop}))
	if err != nil {
		log.Fatal(err)
	}
	if err := kafka.Run(ctx, ch, kafka.Config{Brokers: brokers, Topic: "events", Group: "payments"}); err != nil {
		log.Fatal(err)
	}

	consumer, err := sarama.NewConsumer(brokers, sarama.NewConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition("paid", 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	fmt.Println(string((<-pc.Messages()).Value))
	// Output:
	// o-1 paid for order:book
}

// stopAt is a chain.Observer that ends the run once a commit reaches end.
type stopAt struct {
	end  int64
	stop context.CancelFunc
}

func (s stopAt) Begin(chain.BeginInfo)                         {}
func (s stopAt) Advanced(string, int32, int, int64, time.Time) {}
func (s stopAt) Committed(_ string, _ int32, offset int64, _ string) {
	if offset >= s.end {
		s.stop()
	}
}

// ExampleSecurity configures Run (and the producer) for a cluster that
// takes TLS connections authenticated with SCRAM-SHA-512. Files are read
// when Run starts; the password is a Secret, which prints as [redacted].
func ExampleSecurity() {
	sec := kafka.Security{
		TLS: kafka.TLS{CAFile: "/etc/differential/kafka-ca.pem"},
		SASL: kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: "attribution",
			Password: kafka.Secret(strings.TrimSpace(readFile("/run/secrets/kafka-password")))},
	}
	cfg := kafka.Config{Brokers: []string{"kafka1:9093"}, Topic: "events", Group: "attribution", Security: sec}
	pcfg := kafka.ProducerConfig{Brokers: cfg.Brokers, Security: sec}
	_, _ = cfg, pcfg // kafka.Run(ctx, ch, cfg); kafka.NewProducer(pcfg)
}

func readFile(string) string { return "" }
