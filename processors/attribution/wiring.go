package attribution

import (
	"github.com/differential-dev/differential/chain"
)

// Wiring customises the chain NewChainWith builds. The zero value builds
// what NewChain does.
type Wiring struct {
	// KeyConcurrency is every stage's Stage.KeyConcurrency: records of
	// different keys (user ids) a stage may process at once. 0 or 1: strict
	// partition order. At most the chain's in-flight window
	// (chain.DefaultInFlight unless chain.WithInFlight says otherwise).
	KeyConcurrency int
	// Gate, if set, is the followers' gate scope instead of Chain's
	// chain.GateKey: chain.GatePartition makes every follower wait for its
	// leader's whole partition (the rule before key scope; the outputs are
	// the same, DESIGN.md "Mechanisms"). "" keeps GateKey.
	Gate chain.GateScope
	// Stages, if set, is given the stages of Chain(cfg) (KeyConcurrency
	// applied) and returns the stages to run: benchmarks wrap processors
	// with a simulated cost, tests pause or slow one. It must keep the
	// names, the order and the filters, and a wrapped processor must keep
	// its chain.Sequencer (deduplication).
	Stages func([]chain.Stage) []chain.Stage
	// Decoder, if set, wraps Decoder(cfg) (e.g. to count decoded records).
	Decoder func(chain.Decoder) chain.Decoder
	// AlertsTopic is the velocity stage's alerts topic (Chain's
	// AlertsTopic option) when cfg.Velocity is enabled; "": the chain's
	// output topic.
	AlertsTopic string
}

// NewChain returns the click → install → purchase chain for cfg: the stages
// of Chain(cfg), Decoder(cfg), and opts, with the follower gate's event-time
// distance set to cfg.Lateness (chain.WithLateness, applied after opts so
// nothing overrides it): the install rule relies on the click stage's
// watermark having passed t+Lateness (DESIGN.md "Attribution rules"). It fails, like chain.New,
// with a message saying what to fix; it panics if cfg is invalid (see
// Config.Validate).
func NewChain(cfg Config, opts ...chain.Option) (*chain.Chain, error) {
	return NewChainWith(cfg, Wiring{}, opts...)
}

// NewChainWith is NewChain with the stages and decoder customised by w.
func NewChainWith(cfg Config, w Wiring, opts ...chain.Option) (*chain.Chain, error) {
	stages := Chain(cfg, AlertsTopic(w.AlertsTopic))
	for i := range stages {
		stages[i].KeyConcurrency = w.KeyConcurrency
		if w.Gate != "" && i > 0 {
			stages[i].Gate = w.Gate
		}
	}
	if w.Stages != nil {
		stages = w.Stages(stages)
	}
	dec := Decoder(cfg)
	if w.Decoder != nil {
		dec = w.Decoder(dec)
	}
	// The rules compare the offsets and times of the clicks and installs
	// they read with the record's (Context.Horizon included), so reads of
	// the latest state give the outputs reads as of the horizon would: the
	// store's versions would cost CPU for nothing (opts may turn them on).
	all := make([]chain.Option, 0, len(opts)+2)
	all = append(all, chain.WithAsOfReads(false))
	all = append(all, opts...)
	all = append(all, chain.WithLateness(cfg.Lateness))
	return chain.New(stages, dec, all...)
}
