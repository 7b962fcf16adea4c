package attribution_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// TestNewChainGateUsesTheRulesLateness: the follower gate of NewChain's
// chain uses Config.Lateness whatever the options say. With a lateness of
// 3h in the rules and a gate of 0 (the option given), the install stage,
// right behind its slowed leader, would miss clicks that arrive up to 3h
// late and attribute installs differently from the model.
func TestNewChainGateUsesTheRulesLateness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := attribution.DefaultConfig()
		cfg.Lateness = 3 * time.Hour
		r := runAgainstModel(t, cfg, attribution.Wiring{Stages: slowLeaders}, chain.WithLateness(0))
		require.True(t, r.OK(), r.Summary())
	})
}

func TestNewChainWithAppliesTheWiring(t *testing.T) {
	cfg := attribution.DefaultConfig()
	_, err := attribution.NewChainWith(cfg, attribution.Wiring{KeyConcurrency: chain.DefaultInFlight + 1})
	require.ErrorContains(t, err, `stage "click": key concurrency 1025 exceeds the in-flight window 1024`, "every stage gets the key concurrency")
	_, err = attribution.NewChainWith(cfg, attribution.Wiring{KeyConcurrency: 64}, chain.WithInFlight(2048))
	require.NoError(t, err)

	var decoded atomic.Int64
	var names []string
	w := attribution.Wiring{
		Stages: func(st []chain.Stage) []chain.Stage {
			for _, s := range st {
				names = append(names, s.Name)
			}
			return st
		},
		Decoder: func(d chain.Decoder) chain.Decoder {
			return chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
				decoded.Add(1)
				return d.Decode(r)
			})
		},
	}
	synctest.Test(t, func(t *testing.T) {
		r := runAgainstModel(t, cfg, w)
		require.True(t, r.OK(), r.Summary())
	})
	require.Equal(t, []string{attribution.StageClick, attribution.StageInstall, attribution.StagePurchase}, names[:3])
	require.Equal(t, int64(6000), decoded.Load(), "every record decoded once, through the wrapper")
}
