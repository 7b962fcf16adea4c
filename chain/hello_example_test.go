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

// Example_helloWorld is the README's hello world: a click stage stores each
// user's click, an install stage (its follower) looks the click up. The
// install stage never runs ahead of the click stage, so the click is there.
func Example_helloWorld() {
	// The decoder gives every record a type and an event time, once.
	decode := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, _, _ := strings.Cut(string(r.Value), " ")
		return chain.Decoded{Type: typ, Time: r.Timestamp}, nil
	})
	clicks := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{}) // state key = the record's key
	})
	installs := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		click, found, err := pc.State().Get(e.Key)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s: %q (click found: %v)", e.Key, click, found)})
		return nil
	})
	stages := []chain.Stage{
		{Name: "click", Filter: func(e *chain.Event) bool { return e.Type == "click" }, Processor: clicks},
		{Name: "install", Filter: func(e *chain.Event) bool { return e.Type == "install" }, Processor: installs},
	}

	// chaintest runs the chain with no Kafka; kafka.Run runs the same chain
	// against a consumer group.
	tt := chaintest.New(&testing.T{}, stages, decode, chain.WithStore(store.NewMemory()))
	tt.Start(0)
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tt.Feed(0, chaintest.Rec("u1", "click cmp-7", at), chaintest.Rec("u1", "install app-1", at.Add(time.Minute)))
	_ = tt.Stop()
	for _, m := range tt.Outputs("output") {
		fmt.Println(string(m.Value))
	}
	// Output:
	// u1: "click cmp-7" (click found: true)
}
