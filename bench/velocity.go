package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/window"
)

// The velocity measurement (Options.Velocity): on workload B, the chain with
// the attribution chain's velocity stage (click → velocity → install →
// purchase, attribution.DefaultVelocity(Velocity): threshold 20) runs in the
// throughput phase right after the plain chain, on the same input (the
// plain chain's prefix, sized by time), each repeat; its outputs and alerts are checked against the model with the
// velocity rule. The report gives its throughput ÷ the plain chain's and the
// stage's cost per input record: the difference of the two runs' CPU time
// and of their elapsed times, divided by the records.

// kindVelocity is the chain with the velocity stage.
const kindVelocity kind = "velocity_chain"

// VelocityResult is the velocity measurement of one workload.
type VelocityResult struct {
	// Settings describes the stage ("window 1h, bucket 1m, lateness 1h,
	// threshold 20").
	Settings string        `json:"settings"`
	Chain    *DesignResult `json:"chain"`
	// Alerts is how many alerts the model prescribes for the input.
	Alerts int `json:"alerts"`
	// RatioThroughput is this chain's throughput ÷ the plain chain's.
	RatioThroughput *float64 `json:"ratio_throughput,omitempty"`
	// CPUPerRecordUs and WallPerRecordUs are the added CPU and elapsed time
	// per input record (this run − the plain chain's, ÷ records), µs.
	CPUPerRecordUs  float64 `json:"cpu_per_record_us"`
	WallPerRecordUs float64 `json:"wall_per_record_us"`
}

// velocityConfig is the rules of the velocity runs.
func velocityConfig(base attribution.Config, w time.Duration) attribution.Config {
	base.Velocity = attribution.DefaultVelocity(w)
	return base
}

func velocitySettings(v attribution.VelocityConfig) string {
	return fmt.Sprintf("window %s, bucket %s, lateness %s, threshold %d", window.FormatDuration(v.Window),
		window.FormatDuration(v.Bucket), window.FormatDuration(v.Lateness), v.Threshold)
}

// velocitySpec returns the run of the velocity chain for point pt over
// the input (the plain chain's), or nil when it is not measured there (only
// B, only with Options.Velocity).
func (h *harness) velocitySpec(pt point, in *input) (*runSpec, *VelocityResult) {
	if pt.name != "B" || h.o.Velocity <= 0 {
		return nil, nil
	}
	cfg := velocityConfig(h.cfg, h.o.Velocity)
	exp := newExpectation(in.recs, pt.wc.Partitions, pt.workers, cfg, h.o.IdleTimeout)
	alerts := 0
	for _, r := range exp.model.Results() {
		alerts += len(r.Alerts)
	}
	return &runSpec{kind: kindVelocity, pt: pt, topic: in.topic, ends: in.ends, exp: exp, cfg: &cfg},
		&VelocityResult{Settings: velocitySettings(cfg.Velocity), Alerts: alerts}
}

// finish computes the ratios against the plain chain's run.
func (v *VelocityResult) finish(chain *DesignResult, records int) {
	if v == nil || v.Chain == nil || chain == nil || records == 0 {
		return
	}
	v.RatioThroughput = ratio(v.Chain.ThroughputRPS, chain.ThroughputRPS)
	v.CPUPerRecordUs = (v.Chain.CPUs - chain.CPUs) / float64(records) * 1e6
	v.WallPerRecordUs = (v.Chain.Elapsed - chain.Elapsed) / float64(records) * 1e6
}

func (v *VelocityResult) write(w io.Writer) {
	if v == nil || v.Chain == nil {
		return
	}
	fmt.Fprintf(w, "  chain + velocity stage (%s): %.0f rec/s, %.2fs, cpu %.2fs, heap %.1f MB, %d alerts, %s",
		v.Settings, v.Chain.ThroughputRPS, v.Chain.Elapsed, v.Chain.CPUs, v.Chain.PeakHeapMB, v.Alerts, correctText(v.Chain.Correctness))
	if v.RatioThroughput != nil {
		fmt.Fprintf(w, "; ÷ chain %.2f, %+.1f µs CPU and %+.1f µs elapsed per record", *v.RatioThroughput, v.CPUPerRecordUs, v.WallPerRecordUs)
	}
	fmt.Fprintln(w)
}
