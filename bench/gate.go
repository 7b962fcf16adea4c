package bench

import (
	"time"

	"github.com/differential-dev/differential/chain"
)

// The gate scope dimension: workloads A and C measure the chain
// under Options.Gate (the headline row) and, unless Options.OneGate, under
// the other scope — two chain variants (chainVariants), each sized by time
// and checked like every design run.

// otherGate is the scope Options.Gate is not.
func (o Options) otherGate() chain.GateScope {
	if o.Gate == chain.GatePartition {
		return chain.GateKey
	}
	return chain.GatePartition
}

// orderTime is the bound under the ordering rules of a chain with gate g:
// Bound.KeyOrderTime for the key scope, Bound.ChainOrderTime for the
// partition scope.
func (b Bound) orderTime(g chain.GateScope) time.Duration {
	if g == chain.GateKey {
		return b.KeyOrderTime
	}
	return b.ChainOrderTime
}
