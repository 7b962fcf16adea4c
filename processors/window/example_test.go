package window_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/processors/window"
	"github.com/differential-dev/differential/store"
)

// Example counts each device's clicks over the last 10 minutes of event
// time in a stage of a user's own chain, and flags the clicks that make a
// device exceed 2. The records' event times come from the decoder; the
// counts are exact at the 1-minute bucket granularity, persisted with the
// stage's position and evicted with the stream time.
func Example() {
	counter, err := window.New(window.Config{
		Name:     "clicks",
		Window:   10 * time.Minute,
		Bucket:   time.Minute,
		Lateness: 5 * time.Minute, // clicks up to 5 minutes behind the stream still count
	})
	if err != nil {
		panic(err)
	}
	velocity := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		device := string(ev.Key)
		n, err := counter.Add(ctx, pc, device, ev.Time)
		if err != nil {
			return err
		}
		switch {
		case n == 0:
			fmt.Printf("%s at %s: late, not counted\n", device, ev.Time.Format("15:04"))
		case n > 2:
			pc.Emit(chain.Message{Key: ev.Key, Value: fmt.Appendf(nil, "%s: %d clicks in 10m", device, n)})
		}
		return nil
	})
	// Values are "<type>@<RFC 3339 time>"; the Kafka key is the device.
	decode := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, ts, _ := strings.Cut(string(r.Value), "@")
		t, err := time.Parse(time.RFC3339, ts)
		return chain.Decoded{Type: typ, Time: t}, err
	})
	stages := []chain.Stage{{
		Name:           "velocity",
		Filter:         func(ev *chain.Event) bool { return ev.Type == "click" },
		Processor:      velocity,
		KeyConcurrency: 8, // the counter key is the Kafka key: safe
	}}

	t := &testing.T{} // in a real test, use the test's *testing.T
	tt := chaintest.New(t, stages, decode, chain.WithStore(store.NewMemory()))
	tt.Start(0)
	click := func(device, at string) chain.Record {
		ts := "2026-11-29T" + at + ":00Z"
		return chaintest.Rec(device, "click@"+ts, time.Time{})
	}
	tt.Feed(0,
		click("d1", "10:00"),
		click("d2", "10:01"),
		click("d1", "10:04"),
		click("d1", "10:09"), // third click of d1 in (10:00, 10:10]
		click("d1", "10:12"), // 10:00 has left the window: 10:04, 10:09, 10:12
		click("d1", "10:03"), // 9 minutes behind the stream: late
		click("d1", "10:20"), // 10:12 and itself
	)
	st := counter.Stats()
	fmt.Printf("counted %d, late %d, keys tracked %d\n", st.Counted, st.Late, st.Keys)
	_ = tt.Stop()
	for _, m := range tt.Outputs("output") {
		fmt.Println(string(m.Value))
	}
	// Output:
	// d1 at 10:03: late, not counted
	// counted 6, late 1, keys tracked 2
	// d1: 3 clicks in 10m
	// d1: 3 clicks in 10m
}
