package differential_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential"
	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/embedded"
)

// Example runs a two-stage chain — orders, then payments — over a topic as
// a consumer-group member, against an in-process broker (give your
// brokers' addresses instead). The payment stage never runs ahead of the
// order stage, so it always finds the order. Run returns nil once its
// context ends and every partition has made its final commit.
func Example() {
	cluster, err := embedded.Start(embedded.Topic("events", 1), embedded.Topic("paid", 1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	produce(cluster.Addrs(), "events", "o-1", "order:book", "o-2", "order:pen", "o-1", "payment:9.99")

	orders := func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{}) // kept until deleted
	}
	payments := func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		order, _, err := pc.State().Get(e.Key)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s paid for %s", e.Key, order)})
		return nil
	}
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	go func() { fmt.Println(readOne(cluster.Addrs(), "paid")); stop() }()
	err = differential.Run(ctx, differential.Config{
		Brokers: cluster.Addrs(), Topic: "events", Group: "payments", Output: "paid",
	}, differential.TypePrefix(":"),
		differential.On("order", orders),
		differential.On("payment", payments))
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// o-1 paid for order:book
}

// produce writes key/value pairs to partition 0 of topic.
func produce(brokers []string, topic string, kv ...string) {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < len(kv); i += 2 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(kv[i]), Value: sarama.StringEncoder(kv[i+1])}); err != nil {
			log.Fatal(err)
		}
	}
}

// readOne returns the value of the first record of partition 0 of topic.
func readOne(brokers []string, topic string) string {
	c, err := sarama.NewConsumer(brokers, sarama.NewConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	return string((<-pc.Messages()).Value)
}
