package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Table renders results as a Markdown table, one row per scenario.
func Table(results []*Result) string {
	var b strings.Builder
	b.WriteString("| scenario (seed) | faults → time to recover (every partition caught up, lag within 2 s) | records in | outputs read | repeats identical / conflicting | dead letters | max lag | engine /healthz from the first fault | idle releases | took | check |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|\n")
	for _, r := range results {
		check := "ok"
		if r.Err != nil {
			check = "**FAILED**: " + firstLine(r.Err.Error())
		}
		fmt.Fprintf(&b, "| %s (%d) | %s | %d | %d | %d / %d | %d | %d | %s | %d | %s | %s |\n",
			r.Scenario, r.Seed, faultsCell(r.Faults), r.RecordsIn, r.Outputs,
			r.Verdict.IdenticalDuplicates, r.Verdict.ConflictingDuplicates, r.DeadLetters, r.MaxLag,
			healthCell(r.Health), r.IdleReleases, seconds(r.Took), check)
	}
	return b.String()
}

func faultsCell(fs []Fault) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		rec := "not recovered"
		if f.Recovery >= 0 {
			rec = seconds(f.Recovery)
		}
		parts[i] = fmt.Sprintf("%s → %s", f.What, rec)
	}
	return strings.Join(parts, "; ")
}

func healthCell(h []string) string {
	const most = 8
	if len(h) > most {
		return strings.Join(h[:most-1], " → ") + fmt.Sprintf(" → … (%d more) → ", len(h)-most) + h[len(h)-1]
	}
	return strings.Join(h, " → ")
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.ReplaceAll(l, "|", "/")
}
