package chain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/differential-dev/differential/commit"
)

// Chain is a configured chain of stages. It runs any number of partitions at
// once (RunPartition, one call per assigned partition); the Kafka adapter
// calls it for every claim.
type Chain struct {
	stages []Stage
	names  []string
	dec    Decoder
	cfg    config
	tc     *txnCoordinator // exactly-once mode; nil otherwise
	// private is each stage's Private prefixes (nil: no stage has any);
	// foreign[i] is what stage i may not touch.
	private [][]string
	foreign []*foreignKeys
	// workers is the chain-wide worker cap (WithWorkerCap), shared by
	// every partition's key-parallel stages; nil without a cap.
	workers *workerCap

	mu struct {
		sync.Mutex
		parts map[partKey]*partitionRun
		// claimed counts the RunPartition calls of a partition from their
		// start (before the store opens); standby holds the partitions
		// this chain keeps warm without running them (OpenStandby).
		claimed map[partKey]int
		standby map[partKey]*Standby
	}
}

type partKey struct {
	topic     string
	partition int32
}

// New validates the chain's stages and options.
func New(stages []Stage, dec Decoder, opts ...Option) (*Chain, error) {
	if len(stages) == 0 {
		return nil, errors.New("chain: at least one stage is required")
	}
	if dec == nil {
		return nil, errors.New("chain: a decoder is required")
	}
	seen := map[string]bool{}
	names := make([]string, len(stages))
	for i, s := range stages {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("chain: stage %d has no name", i)
		case seen[s.Name]:
			return nil, fmt.Errorf("chain: stage name %q is used twice", s.Name)
		case s.Processor == nil:
			return nil, fmt.Errorf("chain: stage %q has no processor", s.Name)
		case s.KeyConcurrency < 0:
			return nil, fmt.Errorf("chain: stage %q: key concurrency must be >= 0, got %d", s.Name, s.KeyConcurrency)
		}
		if _, err := ParseGateScope(string(s.Gate)); err != nil {
			return nil, fmt.Errorf("chain: stage %q: %w", s.Name, err)
		}
		seen[s.Name] = true
		names[i] = s.Name
	}
	if err := commit.ValidateStages(names); err != nil {
		return nil, fmt.Errorf("chain: %w", err)
	}
	if err := validatePrivate(stages); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.observer = combine(cfg.observers)
	cfg.completion = completions(cfg.observers)
	for _, s := range stages {
		if s.KeyConcurrency > cfg.inFlight {
			return nil, fmt.Errorf("chain: stage %q: key concurrency %d exceeds the in-flight window %d", s.Name, s.KeyConcurrency, cfg.inFlight)
		}
	}
	c := &Chain{stages: append([]Stage(nil), stages...), names: names, dec: dec, cfg: cfg}
	c.private = privatePrefixes(c.stages)
	c.foreign = make([]*foreignKeys, len(stages))
	for i := range stages {
		c.foreign[i] = foreignTo(c.stages, i)
	}
	c.mu.parts = map[partKey]*partitionRun{}
	c.mu.claimed = map[partKey]int{}
	c.mu.standby = map[partKey]*Standby{}
	if cfg.workerCap > 0 {
		c.workers = newWorkerCap(cfg.workerCap)
	}
	if cfg.txn != nil {
		c.tc = newTxnCoordinator(c)
	}
	return c, nil
}

// ShutdownTimeout is how long a stopping partition lets begun records
// finish (WithShutdownTimeout); a consumer group's rebalance timeout must
// exceed it.
func (c *Chain) ShutdownTimeout() time.Duration { return c.cfg.shutdownTimeout }

// StageNames returns the stages' names in chain order.
func (c *Chain) StageNames() []string { return append([]string(nil), c.names...) }

// Assignment is one partition handed to RunPartition.
type Assignment struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset for the partition, or -1.
	Committed int64
	// Metadata is the commit metadata stored with Committed.
	Metadata  string
	Source    Source
	Committer Committer
}

// RunPartition runs the chain over one partition until ctx ends or the
// source reports io.EOF (the claim ended). It then stops fetching, lets the
// records in flight finish (up to the shutdown timeout), persists the
// checkpoints, makes the final commit and returns. A nil error means a clean
// stop; a fatal processor, producer, store or commit error is returned as a
// *PartitionError after the same final commit of what is complete.
func (c *Chain) RunPartition(ctx context.Context, a Assignment) error {
	k := partKey{a.Topic, a.Partition}
	defer c.claim(k)()
	p, err := newPartitionRun(c, a)
	if err != nil {
		return &PartitionError{Topic: a.Topic, Partition: a.Partition, Err: err}
	}
	c.mu.Lock()
	if _, dup := c.mu.parts[k]; dup {
		c.mu.Unlock()
		p.close()
		return &PartitionError{Topic: a.Topic, Partition: a.Partition, Err: errors.New("partition is already running")}
	}
	c.mu.parts[k] = p
	c.shareBuffersLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.mu.parts, k)
		c.shareBuffersLocked()
		c.mu.Unlock()
	}()
	if err := p.run(ctx); err != nil {
		return &PartitionError{Topic: a.Topic, Partition: a.Partition, Err: err}
	}
	return nil
}

// Stats returns a snapshot of every running partition, sorted by topic and
// partition.
func (c *Chain) Stats() []PartitionStats {
	c.mu.Lock()
	runs := make([]*partitionRun, 0, len(c.mu.parts))
	for _, p := range c.mu.parts {
		runs = append(runs, p)
	}
	c.mu.Unlock()
	out := make([]PartitionStats, 0, len(runs))
	for _, p := range runs {
		out = append(out, p.stats())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
