package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// TestDemoCountsReconcile: the demo's record counts add up — every input
// record is one of valid, resent or invalid; the resends are the skipped
// duplicates plus the late resends processed as new events; the outputs are
// one per processed install and purchase, as the reference model has them;
// every invalid record is dead-lettered. No Kafka: the model's results on a
// generated workload.
func TestDemoCountsReconcile(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		cfg := workload.DefaultConfig()
		cfg.Records, cfg.Partitions, cfg.Seed = 20_000, 4, seed
		recs := workload.Generate(cfg)
		rules := attribution.DefaultConfig()
		model := reference.Expect(workload.Split(recs, cfg.Partitions), rules)
		c := countDemo(recs, model.Results(), rules)

		installs, purchases, invalid, dups := 0, 0, 0, 0
		for _, r := range model.Results() {
			installs += len(r.Installs)
			purchases += len(r.Purchases)
			invalid += len(r.Invalid)
			dups += len(r.Duplicates)
		}
		require.Equal(t, c.records, c.original.sum()+c.resent.sum()+c.invalid, "seed %d: records in", seed)
		require.Equal(t, invalid, c.invalid, "seed %d: invalid records are the model's", seed)
		require.Equal(t, dups, c.skipped.sum(), "seed %d: skipped are the model's duplicates", seed)
		require.Positive(t, c.resent.sum(), "seed %d: the workload resends events", seed)
		require.Positive(t, c.processedResent.sum(), "seed %d: some resends fall beyond the dedup horizon", seed)
		require.Equal(t, c.resent.sum(), c.skipped.sum()+c.processedResent.sum(),
			"seed %d: every resend is skipped or processed as new; no record written once is a duplicate", seed)
		require.Equal(t, installs, c.processed(attribution.TypeInstall), "seed %d: one install output per processed install", seed)
		require.Equal(t, purchases, c.processed(attribution.TypePurchase), "seed %d: one purchase output per processed purchase", seed)

		var b bytes.Buffer
		c.report(&b, rules.DedupHorizon, installs+purchases, installs, purchases, invalid)
		requireReportAddsUp(t, b.String())
	}
}

var reportNumber = regexp.MustCompile(`\d[\d,]*`)

// reportNumbers returns the numbers of the report line that starts with
// label, in order.
func reportNumbers(t *testing.T, report, label string) []int {
	t.Helper()
	for _, line := range strings.Split(report, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
			var ns []int
			for _, m := range reportNumber.FindAllString(rest, -1) {
				n, err := strconv.Atoi(strings.ReplaceAll(m, ",", ""))
				require.NoError(t, err)
				ns = append(ns, n)
			}
			return ns
		}
	}
	t.Fatalf("no %q line in the report:\n%s", label, report)
	return nil
}

// requireReportAddsUp reads the demo report as a reader would and checks
// that its printed totals are the sums of their printed parts.
func requireReportAddsUp(t *testing.T, report string) {
	t.Helper()
	in := reportNumbers(t, report, "records in")      // total, valid, clicks, installs, purchases, resent, invalid
	skipped := reportNumbers(t, report, "duplicates") // skipped, horizon days, clicks, installs, purchases
	late := reportNumbers(t, report, "late resends")  // late, clicks, installs, purchases
	out := reportNumbers(t, report, "outputs")        // total, installs, valid, late, purchases, valid, late
	dead := reportNumbers(t, report, "dead-lettered") // dead letters, malformed
	require.Len(t, in, 7, report)
	require.Len(t, skipped, 5, report)
	require.Len(t, late, 4, report)
	require.Len(t, out, 7, report)
	require.Len(t, dead, 2, report)
	require.Equal(t, in[0], in[1]+in[5]+in[6], "records in = written once + resent + invalid:\n%s", report)
	require.Equal(t, in[1], in[2]+in[3]+in[4], "written once = clicks + installs + purchases:\n%s", report)
	require.Equal(t, skipped[0], skipped[2]+skipped[3]+skipped[4], report)
	require.Equal(t, late[0], late[1]+late[2]+late[3], report)
	require.Equal(t, in[5], skipped[0]+late[0], "resent = skipped + late resends:\n%s", report)
	require.Equal(t, out[0], out[1]+out[4], "outputs = installs + purchases:\n%s", report)
	require.Equal(t, out[1], out[2]+out[3], "installs = written once + late resends:\n%s", report)
	require.Equal(t, out[4], out[5]+out[6], "purchases = written once + late resends:\n%s", report)
	require.Equal(t, in[3], out[2], "every install written once has an output:\n%s", report)
	require.Equal(t, late[2], out[3], "every late resent install has an output:\n%s", report)
	require.Equal(t, in[4], out[5], report)
	require.Equal(t, late[3], out[6], report)
	require.Equal(t, in[6], dead[0], "every invalid record is dead-lettered:\n%s", report)
}
