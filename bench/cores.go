package bench

import (
	"context"
	"fmt"
	"runtime"
)

// The cores sweep (Options.Cores) measures the chain and the strongest
// micro-batch on workload B at each GOMAXPROCS in turn, to show how each
// scales with cores. It runs in this process, as every run does:
// GOMAXPROCS can be changed between runs, and the embedded broker, in the same process, is then
// held to the same cores as the design it serves — the machine has n
// cores, broker included. A real cluster's brokers keep theirs.

// CoresPoint is the chain and the strongest micro-batch at one GOMAXPROCS.
type CoresPoint struct {
	Cores     int           `json:"cores"`
	Chain     *DesignResult `json:"chain"`
	Strongest *DesignResult `json:"microbatch_strongest"`
	// ChainSpeedup and StrongestSpeedup are the throughput ÷ the same
	// design's at the sweep's fewest cores.
	ChainSpeedup     *float64 `json:"chain_speedup,omitempty"`
	StrongestSpeedup *float64 `json:"strongest_speedup,omitempty"`
	// ChainOfBound and StrongestOfBound are the throughput ÷ (Cores ÷ the
	// CPU floor), when the floor was measured.
	ChainOfBound     *float64 `json:"chain_of_bound,omitempty"`
	StrongestOfBound *float64 `json:"strongest_of_bound,omitempty"`
}

// withProcs runs f with GOMAXPROCS n and restores the previous value,
// whatever f does.
func withProcs(n int, f func() error) error {
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	return f()
}

// coresSweep measures the chain (its headline variant) and the strongest
// micro-batch at batch size batch on pr's point at each of Options.Cores,
// each run sized by time at its own throughput (hint: a first guess at
// the machine's full cores). floor, when set, gives each row its fractions
// of the bound on its cores.
func (h *harness) coresSweep(ctx context.Context, pr *pointRun, batch int, hint float64, floor *CPUFloor) ([]CoresPoint, error) {
	var pts []CoresPoint
	v := &h.o.chainVariants(pr.pt)[0]
	for _, n := range h.o.Cores {
		cp := CoresPoint{Cores: n}
		err := withProcs(n, func() error {
			// A first guess in proportion to the cores; steady resizes.
			guess := hint * float64(n) / float64(runtime.NumCPU())
			h.progressf("  cores sweep: GOMAXPROCS %d", n)
			var err error
			if cp.Chain, err = h.steady(ctx, pr, runSpec{kind: kindChain, variant: v}, guess); err != nil {
				return err
			}
			cp.Strongest, err = h.steady(ctx, pr, runSpec{kind: kindStrongest, batch: batch}, guess)
			return err
		})
		if err != nil {
			return pts, fmt.Errorf("bench: cores sweep at GOMAXPROCS %d: %w", n, err)
		}
		pts = append(pts, cp)
	}
	finishCores(pts, floor)
	return pts, nil
}

// finishCores sets each point's speed-ups against the point with the
// fewest cores, and its fractions of the floor's bound on its cores.
func finishCores(pts []CoresPoint, floor *CPUFloor) {
	if len(pts) == 0 {
		return
	}
	base := 0
	for i := range pts {
		if pts[i].Cores < pts[base].Cores {
			base = i
		}
	}
	b := pts[base]
	for i := range pts {
		p := &pts[i]
		if p.Chain != nil && b.Chain != nil {
			p.ChainSpeedup = ratio(p.Chain.ThroughputRPS, b.Chain.ThroughputRPS)
		}
		if p.Strongest != nil && b.Strongest != nil {
			p.StrongestSpeedup = ratio(p.Strongest.ThroughputRPS, b.Strongest.ThroughputRPS)
		}
		if floor != nil && floor.FloorUs > 0 {
			bound := float64(p.Cores) / (floor.FloorUs / 1e6)
			if p.Chain != nil {
				p.ChainOfBound = ratio(p.Chain.ThroughputRPS, bound)
			}
			if p.Strongest != nil {
				p.StrongestOfBound = ratio(p.Strongest.ThroughputRPS, bound)
			}
		}
	}
}

// cpuPerRecordUs is a run's process CPU per input record, µs.
func cpuPerRecordUs(d *DesignResult) float64 {
	if d == nil || d.Records <= 0 {
		return 0
	}
	return d.CPUs * 1e6 / float64(d.Records)
}
