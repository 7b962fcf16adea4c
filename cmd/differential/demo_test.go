package main

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

func TestDemoVerifiesAndReports(t *testing.T) {
	code, out, errs := runCLI(t, hooks{}, "demo", "--records", "5000", "--partitions", "3", "--seed", "2")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "Differential demo: 5,000 records, 3 partitions, seed 2")
	require.Contains(t, out, "verification    OK")
	require.Regexp(t, `outputs\s+[\d,]+ \(installs [\d,]+, purchases [\d,]+\)`, out)
	require.Regexp(t, `dead-lettered\s+[1-9]`, out)
	require.Contains(t, errs, "click pos 5,000", "the progress shows every stage at the end")
}

// TestDemoFailsWhenAnOutputIsLost breaks the demo's read-back on purpose
// (a test-only hook): the demo must exit 1 and report the lost output.
func TestDemoFailsWhenAnOutputIsLost(t *testing.T) {
	drop := func(recs []readRecord) []readRecord { return slices.Delete(recs, 10, 11) }
	code, out, errs := runCLI(t, hooks{tamperOutputs: drop}, "demo", "--records", "2000", "--partitions", "2")
	require.Equal(t, exitFatal, code)
	require.Contains(t, out, "verification    FAILED: 1 problem(s)")
	require.Contains(t, out, "lost: no ")
	require.Contains(t, errs, "verification failed")
}

// perfect returns what a correct engine writes for inputs: the reference
// model's outputs with their source header, each in the output partition of
// its key, and the dead letters.
func perfect(inputs [][]chain.Record, cfg attribution.Config) (outputs, dlq []readRecord) {
	n := int32(len(inputs))
	next := make([]int64, n)
	for p, recs := range inputs {
		ref := reference.Run(recs, cfg)
		all := append(slices.Clone(ref.Installs), ref.Purchases...)
		slices.SortStableFunc(all, func(a, b reference.Output) int { return cmpInt(a.Offset, b.Offset) })
		for _, o := range all {
			op := workload.Partition(o.Key, n)
			outputs = append(outputs, readRecord{Partition: op, Offset: next[op], Key: o.Key, Value: o.Value,
				Headers: map[string]string{attribution.SourceHeader: fmt.Sprintf("%d/%d", p, o.Offset)}})
			next[op]++
		}
		for i, inv := range ref.Invalid {
			r := recs[slices.IndexFunc(recs, func(r chain.Record) bool { return r.Offset == inv.Offset })]
			dlq = append(dlq, readRecord{Offset: int64(i), Key: r.Key, Value: r.Value, Headers: map[string]string{
				chain.HeaderDLQPartition: fmt.Sprint(p), chain.HeaderDLQOffset: fmt.Sprint(inv.Offset), chain.HeaderDLQReason: inv.Reason}})
		}
	}
	slices.SortStableFunc(outputs, func(a, b readRecord) int { return int(a.Partition - b.Partition) })
	return outputs, dlq
}

// TestVerifyCatchesBrokenOutputs feeds the verifier outputs broken on
// purpose: each break must fail it with a message saying what is wrong.
func TestVerifyCatchesBrokenOutputs(t *testing.T) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Seed, wc.MaxRecordBytes = 3000, 2, 3, testRecordBytes
	inputs := workload.Split(workload.Generate(wc), wc.Partitions)
	cfg := testRules()
	good, dead := perfect(inputs, cfg)

	v := verify(inputs, cfg, good, dead)
	require.True(t, v.OK(), v.Summary())
	require.Equal(t, v.WantInstalls, v.Installs)
	require.Equal(t, v.WantPurchases, v.Purchases)
	require.Equal(t, v.WantInvalid, v.DeadLettered)

	// Indexes of two outputs of the same stage, key and output partition.
	first, second := -1, -1
	for i := range good {
		for j := i + 1; j < len(good) && first < 0; j++ {
			if good[j].Partition == good[i].Partition && string(good[j].Key) == string(good[i].Key) && kindOf(good[j].Value) == kindOf(good[i].Value) {
				first, second = i, j
			}
		}
	}
	require.GreaterOrEqual(t, first, 0)

	clone := func(recs []readRecord) []readRecord { return slices.Clone(recs) }
	for _, tc := range []struct {
		name   string
		break_ func(out, dlq []readRecord) ([]readRecord, []readRecord)
		want   string
	}{
		{"lost output", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			return slices.Delete(clone(out), 5, 6), dlq
		}, "lost: no "},
		{"duplicated output", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			return append(clone(out), out[7]), dlq
		}, "duplicated: the "},
		{"changed output", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			out = clone(out)
			out[3].Value = append(slices.Clone(out[3].Value[:len(out[3].Value)-1]), ' ', '}')
			return out, dlq
		}, "different: "},
		{"reordered outputs of one key", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			out = clone(out)
			out[first], out[second] = out[second], out[first]
			return out, dlq
		}, "out of order: "},
		{"output without source", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			out = clone(out)
			out[0].Headers = map[string]string{}
			return out, dlq
		}, "has no valid differential-source header"},
		{"output for an input that has none", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			extra := out[0]
			extra.Headers = map[string]string{attribution.SourceHeader: fmt.Sprintf("0/%d", len(inputs[0])+5)}
			return append(clone(out), extra), dlq
		}, "unexpected: "},
		{"lost dead letter", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			return out, slices.Delete(clone(dlq), 0, 1)
		}, "lost: no dead-letter output"},
		{"duplicated dead letter", func(out, dlq []readRecord) ([]readRecord, []readRecord) {
			return out, append(clone(dlq), dlq[2])
		}, "duplicated: the dead-letter output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, dl := tc.break_(good, dead)
			v := verify(inputs, cfg, out, dl)
			require.False(t, v.OK())
			require.Contains(t, v.Summary(), tc.want)
			require.Contains(t, v.Summary(), "FAILED")
		})
	}
}
