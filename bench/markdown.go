package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// ReadJSON reads the workload results that Report.WriteJSON wrote
// (`differential bench --json`).
func ReadJSON(r io.Reader) ([]WorkloadResult, error) {
	var ws []WorkloadResult
	if err := json.NewDecoder(r).Decode(&ws); err != nil {
		return nil, fmt.Errorf("bench: read the JSON report: %w", err)
	}
	return ws, nil
}

// WriteMarkdown writes the throughput table of workload results as one
// Markdown table: a row per design run of each workload, in the order of the
// report's own table (the chain variants, the strongest micro-batch, the
// micro-batch baseline, the polling fallback, the ceilings). A workload of
// the exactly-once cost table has no such runs and no rows.
func WriteMarkdown(w io.Writer, ws []WorkloadResult) error {
	var b strings.Builder
	b.WriteString("| workload | design | input records | records/s | run s | checkpoint syncs (busiest partition) | commits | CPU s | peak heap MB | efficiency | of own bound | correct |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i := range ws {
		wr := &ws[i]
		label := fmt.Sprintf("%s: %d partitions, W=%d", wr.Workload, wr.Partitions, wr.Workers)
		for _, d := range wr.rows() {
			if d == nil {
				continue
			}
			syncs, commits, correct := fmt.Sprintf("%d (%d)", d.Syncs, d.CheckpointsMost), fmt.Sprint(d.Commits), correctText(d.Correctness)
			if k := kind(d.Design); k == kindRaw || k == kindNoop {
				syncs, commits, correct = "", "", "–"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f | %s | %s | %.2f | %.1f | %s | %s | %s |\n",
				label, designLabel(d), thousands(float64(d.Records)), thousands(d.ThroughputRPS), d.Elapsed,
				syncs, commits, d.CPUs, d.PeakHeapMB, dash(optf(d.Efficiency, "%.2f")), dash(optf(d.EfficiencyOwn, "%.2f")), correct)
			label = ""
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// dash writes a missing figure as the tables do.
func dash(s string) string {
	if s == "-" || s == "" {
		return "–"
	}
	return s
}
