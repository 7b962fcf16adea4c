package chain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/store"
)

// Example_pipeline declares a two-stage chain (orders → payments) with a
// decoder, runs it with no Kafka through chaintest, and prints the outputs.
// Against Kafka the same chain is run by kafka.Run.
func Example_pipeline() {
	decode := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, _, ok := strings.Cut(string(r.Value), ":")
		if !ok {
			return chain.Decoded{}, fmt.Errorf("want type:payload, got %q", r.Value)
		}
		return chain.Decoded{Type: typ, Time: r.Timestamp}, nil
	})
	byType := func(t string) func(*chain.Event) bool {
		return func(e *chain.Event) bool { return e.Type == t }
	}
	// The order stage remembers orders; the payment stage (its follower)
	// never runs ahead of it, so the order is always there.
	orders := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{})
	})
	payments := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		order, ok, err := pc.State().Get(e.Key)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s paid (order found: %v %s)", e.Key, ok, order)})
		return nil
	})
	stages := []chain.Stage{
		{Name: "orders", Filter: byType("order"), Processor: orders},
		{Name: "payments", Filter: byType("payment"), Processor: payments},
	}

	t := &testing.T{} // in a real test, use the test's *testing.T
	tt := chaintest.New(t, stages, decode, chain.WithStore(store.NewMemory()), chain.WithIdleTimeout(time.Millisecond))
	tt.Start(0)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tt.Feed(0,
		chaintest.Rec("o-1", "order:book", now),
		chaintest.Rec("o-1", "payment:9.99", now.Add(time.Minute)),
		chaintest.Rec("o-2", "garbage", now.Add(2*time.Minute)),
	)
	_ = tt.Stop()
	for _, m := range tt.Outputs("output") {
		fmt.Println(string(m.Value))
	}
	fmt.Println("dead letters:", len(tt.Outputs("dlq")))
	// Output:
	// o-1 paid (order found: true order:book)
	// dead letters: 1
}
