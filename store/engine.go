package store

import (
	"fmt"
	"strings"
	"sync"

	"github.com/differential-dev/differential/chain"
)

// engine is what DB and Memory share: a backend and the registry of open
// partitions.
type engine struct {
	be backend
	// budget bounds the memory of the partitions' mirrors (cache.go); nil:
	// partitions read be directly.
	budget *cacheBudget
	mu     struct {
		sync.Mutex
		closed bool
		open   map[string]*partitionStore // by key prefix
	}
}

func (e *engine) init(be backend) {
	e.be = be
	e.mu.open = make(map[string]*partitionStore)
}

// OpenPartition opens the state of one partition for the given chain stages
// (in chain order). A partition can be open once at a time; after Close it
// can be opened again and sees exactly its persisted state.
func (e *engine) OpenPartition(topic string, partition int32, stages []string) (chain.PartitionStore, error) {
	p, err := e.openPartition(topic, partition, stages)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return p, nil
}

func (e *engine) openPartition(topic string, partition int32, stages []string) (*partitionStore, error) {
	if err := validateOpen(topic, partition, stages); err != nil {
		return nil, &Error{Topic: topic, Partition: partition, Op: "open", Err: err}
	}
	p := newPartitionStore(e, topic, partition, stages)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return nil, &Error{Topic: topic, Partition: partition, Op: "open", Err: ErrClosed}
	}
	if _, ok := e.mu.open[p.id]; ok {
		return nil, &Error{Topic: topic, Partition: partition, Op: "open", Err: ErrPartitionOpen}
	}
	e.mu.open[p.id] = p
	e.mu.Unlock()
	// Registered, so no other handle of the partition can write meanwhile;
	// nobody else has p yet.
	var err error
	if e.budget != nil {
		var m *mirrored
		if m, err = newMirrored(e.be, e.budget, p.ks.prefix, p.ks.end()); err == nil {
			p.be = m
		}
	}
	var f *keyFilter
	if err == nil {
		f, err = p.buildFilter()
	}
	if err == nil {
		err = p.buildExpiryIndex()
	}
	if err == nil {
		err = p.loadHists()
	}
	e.mu.Lock()
	if err != nil {
		delete(e.mu.open, p.id)
		if m, ok := p.be.(*mirrored); ok {
			m.drop()
		}
		return nil, &Error{Topic: topic, Partition: partition, Op: "open", Err: err}
	}
	p.filter.Store(f)
	return p, nil
}

func validateOpen(topic string, partition int32, stages []string) error {
	switch {
	case topic == "" || strings.Contains(topic, "/"):
		return fmt.Errorf("%w: topic %q (must be non-empty, without '/')", ErrInvalid, topic)
	case partition < 0:
		return fmt.Errorf("%w: partition %d", ErrInvalid, partition)
	case len(stages) == 0:
		return fmt.Errorf("%w: no stages", ErrInvalid)
	}
	seen := make(map[string]bool, len(stages))
	for _, s := range stages {
		if s == "" || seen[s] {
			return fmt.Errorf("%w: stage name %q empty or repeated", ErrInvalid, s)
		}
		seen[s] = true
	}
	return nil
}

// unregister is called by a partition's Close.
func (e *engine) unregister(p *partitionStore) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.open[p.id] == p {
		delete(e.mu.open, p.id)
	}
}

// close closes every open partition and refuses new ones.
func (e *engine) close() error {
	e.mu.Lock()
	e.mu.closed = true
	open := make([]*partitionStore, 0, len(e.mu.open))
	for _, p := range e.mu.open {
		open = append(open, p)
	}
	e.mu.Unlock()
	// Outside e.mu: Close waits for a checkpoint in progress and then calls
	// unregister.
	for _, p := range open {
		if err := p.Close(); err != nil {
			return err
		}
	}
	return nil
}
