//go:build chaosbreak

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/differential-dev/differential/chain"
)

// A build with the chaosbreak tag is a broken engine, for showing that the
// fault-injection suite (internal/chaos) catches one. `run` reads:
//
//	DIFFERENTIAL_BREAK=drop-output            acknowledge an output without sending it
//	DIFFERENTIAL_BREAK=conflicting-duplicate  send an output twice, the second copy changed
//	DIFFERENTIAL_BREAK_AFTER=file             only once file exists (default: at once)
//
// Either happens to every breakEvery-th output from then on, so a break is
// never undone by a repeat: an at-least-once engine that reprocesses a
// dropped record after a rebalance sends it again, but later ones are
// dropped too.
func buildHooks() hooks {
	mode := os.Getenv("DIFFERENTIAL_BREAK")
	switch mode {
	case "":
		return hooks{}
	case "drop-output", "conflicting-duplicate":
	default:
		fmt.Fprintf(os.Stderr, "DIFFERENTIAL_BREAK=%q: want drop-output or conflicting-duplicate\n", mode)
		os.Exit(2)
	}
	after := os.Getenv("DIFFERENTIAL_BREAK_AFTER")
	return hooks{wrapProducer: func(p chain.Producer) chain.Producer {
		return &breakingProducer{Producer: p, mode: mode, after: after}
	}}
}

const breakEvery = 500

type breakingProducer struct {
	chain.Producer
	mode, after string
	armed       atomic.Bool
	outputs     atomic.Int64 // outputs seen since armed
}

func (b *breakingProducer) Produce(ctx context.Context, msgs []chain.Message, done func(error)) {
	if !b.armed.Load() {
		if _, err := os.Stat(b.after); b.after != "" && err != nil {
			b.Producer.Produce(ctx, msgs, done)
			return
		}
		b.armed.Store(true)
	}
	var out []chain.Message
	for _, m := range msgs {
		// Outputs, not dead letters: attribution outputs are {"kind":…}.
		if !bytes.HasPrefix(m.Value, []byte(`{"kind":`)) || b.outputs.Add(1)%breakEvery != 0 {
			out = append(out, m)
			continue
		}
		switch b.mode {
		case "drop-output":
			// acknowledged with the rest, never sent
		case "conflicting-duplicate":
			changed := m
			changed.Value = append(slices.Clip(m.Value), ' ')
			out = append(out, m, changed)
		}
	}
	if len(out) == 0 {
		done(nil)
		return
	}
	b.Producer.Produce(ctx, out, done)
}
