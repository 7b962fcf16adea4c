package workload

import (
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClickSpam: bursts of a user's clicks close in event time, only when
// asked for. (A workload without spam is byte-identical to what the
// generator made before the option existed: its draws are guarded by
// ClickSpamFrac > 0; checked once by digest when the option was added.)
func TestClickSpam(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Records = 20_000
	for k := range CountKinds(Generate(cfg)) {
		require.NotContains(t, k, "spam")
	}

	cfg.ClickSpamFrac = 0.01
	recs := Generate(cfg)
	require.Len(t, recs, cfg.Records)
	times := map[string][]time.Time{}
	for _, r := range recs {
		if r.Kind != "click/spam" && r.Kind != "click/spam/late" && r.Kind != "click/spam/clock-ahead" {
			continue
		}
		var v struct {
			User string `json:"user_id"`
			Time string `json:"time"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &v))
		ts, err := time.Parse(time.RFC3339Nano, v.Time)
		require.NoError(t, err)
		times[v.User] = append(times[v.User], ts)
	}
	require.NotEmpty(t, times)
	bursts := 0
	for _, ts := range times {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := 20; i < len(ts); i++ {
			if ts[i].Sub(ts[i-20]) <= time.Hour {
				bursts++
				break
			}
		}
	}
	require.Positive(t, bursts, "users with 21 clicks within an hour")
	require.Contains(t, cfg.String(), "click-spam=0.01")
}
