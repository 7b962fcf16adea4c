package microbatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

func TestMicroBatchCutKeepsTheGate(t *testing.T) {
	stages := attribution.Chain(attribution.DefaultConfig())
	ev := func(o int64, typ string, sec int) chain.Event {
		return chain.Event{Record: chain.Record{Offset: o}, Decoded: chain.Decoded{Type: typ, Time: time.Unix(int64(sec), 0)}}
	}
	m := New(Config{Stages: stages, IdleTimeout: time.Hour})
	now := time.Now()
	cases := []struct {
		name     string
		lateness time.Duration
		held     []chain.Event
		want     int
	}{
		{"install is the latest time: held", 0, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 2)}, 1},
		{"a later time releases it", 0, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 4)}, 3},
		{"lateness holds more", 2 * time.Second, []chain.Event{ev(0, "click", 1), ev(1, "install", 3), ev(2, "click", 4)}, 1},
		{"clicks only", 0, []chain.Event{ev(0, "click", 5), ev(1, "click", 4)}, 2},
		{"purchase is gated too", 0, []chain.Event{ev(0, "click", 1), ev(1, "purchase", 2)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m.lateness = tc.lateness
			p := &mbPartition{held: tc.held, lastArrival: now}
			require.Equal(t, tc.want, m.cut(p, now))
		})
	}
}
