package main

import (
	"context"
	"fmt"
	"os"

	"github.com/differential-dev/differential/bench"
)

const benchTableSynopsis = `Prints the throughput table of a JSON report that 'differential bench --json'
wrote, as the Markdown table docs/benchmark.md shows: one row per design run of
each workload. Nothing is measured.`

// benchTableCmd is `differential bench-table`.
func benchTableCmd(_ context.Context, args []string, e *env) error {
	var path string
	fs := newFlagSet("bench-table", benchTableSynopsis, e)
	fs.StringVar(&path, "json", "", "the JSON report `file` (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if path == "" {
		return usagef("--json is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	defer f.Close()
	ws, err := bench.ReadJSON(f)
	if err != nil {
		return fmt.Errorf("--json %s: %w", path, err)
	}
	return bench.WriteMarkdown(e.stdout, ws)
}
