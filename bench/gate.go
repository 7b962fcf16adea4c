package bench

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/differential-dev/differential/chain"
)

// The gate scope dimension (issue #13): workloads A and C run the chain
// twice, with Options.Gate (the headline row, "chain") and with the other
// scope (kindChainOtherGate, the row "chain/<scope>"), alternating with the
// baselines like every design; Options.OneGate runs the first only.

// kindChainOtherGate is the chain with the gate scope Options.Gate is not.
const kindChainOtherGate kind = "chain_other_gate"

// otherGate is the scope kindChainOtherGate runs with.
func (o Options) otherGate() chain.GateScope {
	if o.Gate == chain.GatePartition {
		return chain.GateKey
	}
	return chain.GatePartition
}

// gateOf is the gate scope of a chain design of kind k.
func (o Options) gateOf(k kind) chain.GateScope {
	if k == kindChainOtherGate {
		return o.otherGate()
	}
	return o.Gate
}

// orderTime is the bound under the ordering rules of a chain with gate g:
// Bound.KeyOrderTime for the key scope, Bound.ChainOrderTime for the
// partition scope.
func (b Bound) orderTime(g chain.GateScope) float64 {
	if g == chain.GateKey {
		return b.KeyOrderTime.Seconds()
	}
	return b.ChainOrderTime.Seconds()
}

// chainRowName names a chain row of the table by its gate scope.
func chainRowName(g string) string {
	if g == "" {
		return "chain"
	}
	return "chain/" + g
}

// writeLatencyFloors prints, for every workload point with a latency phase,
// each design's p99 beside the event-time floor's: the least latency the
// gate's lateness rule allows at that load (a record waits until a later
// event time is read on its partition, or for the idle release), the same
// under both gate scopes — the key scope still waits for q(t+Lateness).
func (r *Report) writeLatencyFloors(b *strings.Builder) {
	var rows []*WorkloadResult
	for i := range r.Workloads {
		if w := &r.Workloads[i]; w.Chain != nil && w.Chain.FloorP99ms != nil && w.Chain.P99ms != nil {
			rows = append(rows, w)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nlatency p99 (ms) beside the event-time floor at the same offered load\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  point\toffered rec/s\tfloor p50\tfloor p99\tchain\tchain ÷ floor\tother scope\tmicro-batch\tmicro-batch ÷ chain\t")
	for _, w := range rows {
		c := w.Chain
		other, micro, ratio := "-", "-", "-"
		if o := w.ChainOtherGate; o != nil && o.P99ms != nil {
			other = fmt.Sprintf("%.1f (%s)", *o.P99ms, w.OtherGate)
		}
		if m := w.MicroBatch; m != nil && m.P99ms != nil {
			micro = fmt.Sprintf("%.1f", *m.P99ms)
			ratio = fmt.Sprintf("%.1f", *m.P99ms / *c.P99ms)
		}
		fmt.Fprintf(tw, "  %s P=%d W=%d\t%.0f\t%.1f\t%.1f\t%.1f (%s)\t%.2f\t%s\t%s\t%s\t\n", w.Workload, w.Partitions, w.Workers,
			w.LatencyRate, *c.FloorP50ms, *c.FloorP99ms, *c.P99ms, w.Gate, *c.P99ms / *c.FloorP99ms, other, micro, ratio)
	}
	tw.Flush()
}
