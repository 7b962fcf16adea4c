package reference_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// checkInput is a small generated input over two partitions.
func checkInput(t *testing.T) ([][]chain.Record, attribution.Config) {
	t.Helper()
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Seed, wc.MaxRecordBytes = 3000, 2, 3, 4096
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	return workload.Split(workload.Generate(wc), wc.Partitions), cfg
}

// perfect is what a correct engine writes for inputs: the model's outputs
// with their source header, each in the output partition of its key (two
// partitions), each input partition's in offset order; the dead letters in
// one partition.
func perfect(inputs [][]chain.Record, cfg attribution.Config) (outputs, dead []reference.Written) {
	const parts = 2
	next := make([]int64, parts)
	byPart := make([][]reference.Written, parts)
	for p, recs := range inputs {
		ref := reference.Run(recs, cfg)
		all := append(slices.Clone(ref.Installs), ref.Purchases...)
		slices.SortStableFunc(all, func(a, b reference.Output) int { return int(a.Offset - b.Offset) })
		for _, o := range all {
			op := workload.Partition(o.Key, parts)
			byPart[op] = append(byPart[op], reference.Written{Partition: op, Offset: next[op], Key: o.Key, Value: o.Value,
				Headers: []chain.Header{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(int32(p), o.Offset)}}})
			next[op]++
		}
		for _, inv := range ref.Invalid {
			r := recs[slices.IndexFunc(recs, func(r chain.Record) bool { return r.Offset == inv.Offset })]
			dead = append(dead, deadLetter(int64(len(dead)), int32(p), inv.Offset, r.Key, r.Value))
		}
	}
	return append(byPart[0], byPart[1]...), dead
}

func deadLetter(at int64, p int32, o int64, key, value []byte) reference.Written {
	return reference.Written{Offset: at, Key: key, Value: value, Headers: []chain.Header{
		{Key: []byte(chain.HeaderDLQReason), Value: []byte("invalid")},
		{Key: []byte(chain.HeaderDLQPartition), Value: []byte(strconv.Itoa(int(p)))},
		{Key: []byte(chain.HeaderDLQOffset), Value: strconv.AppendInt(nil, o, 10)},
	}}
}

// neighbours returns the indexes of two outputs that follow each other in
// their group — one output partition, input partition and stage — of the
// same key (sameKey) or of different keys.
func neighbours(t *testing.T, out []reference.Written, sameKey bool) (int, int) {
	t.Helper()
	src := func(w reference.Written) int32 {
		v, _ := w.Header(attribution.SourceHeader)
		p, _, err := attribution.ParseSource(v)
		require.NoError(t, err)
		return p
	}
	kind := func(w reference.Written) string { return string(w.Value[:12]) }
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			a, b := out[i], out[j]
			if a.Partition != b.Partition || src(a) != src(b) || kind(a) != kind(b) || (sameKey && string(a.Key) != string(b.Key)) {
				continue
			}
			if (string(a.Key) == string(b.Key)) == sameKey {
				return i, j
			}
			break
		}
	}
	t.Fatal("no such pair of outputs")
	return 0, 0
}

func TestCheckAcceptsWhatTheModelPrescribes(t *testing.T) {
	inputs, cfg := checkInput(t)
	out, dead := perfect(inputs, cfg)
	exp := reference.Expect(inputs, cfg)
	for _, o := range []reference.Options{
		{Duplicates: reference.NoDuplicates, Order: reference.StageOrder},
		{Duplicates: reference.IdenticalDuplicates, Order: reference.KeyOrder},
		{},
	} {
		r := exp.Check(out, dead, o)
		require.True(t, r.OK(), r.Summary())
		require.NoError(t, r.Err())
		require.Contains(t, r.Summary(), "OK: in all 2 partitions")
		require.Positive(t, r.Installs.Want)
		require.Positive(t, r.Purchases.Want)
		require.Positive(t, r.DeadLetters.Want)
		require.Positive(t, r.Skipped)
		for _, c := range []reference.Counts{r.Installs, r.Purchases, r.DeadLetters} {
			require.Equal(t, reference.Counts{Want: c.Want, Matched: c.Want}, c)
		}
		require.Equal(t, len(out), r.OutputsRead)
		require.Equal(t, len(dead), r.DeadLettersRead)
	}
}

// TestCheckFindsEveryKindOfProblem breaks correct outputs one way at a time:
// each break must be counted where it belongs and described.
func TestCheckFindsEveryKindOfProblem(t *testing.T) {
	inputs, cfg := checkInput(t)
	good, goodDead := perfect(inputs, cfg)
	exp := reference.Expect(inputs, cfg)
	sk1, sk2 := neighbours(t, good, true)
	dk1, dk2 := neighbours(t, good, false)
	strict := reference.Options{Order: reference.StageOrder}
	atLeastOnce := reference.Options{Duplicates: reference.IdenticalDuplicates, Order: reference.KeyOrder}
	type tc struct {
		name   string
		break_ func(out, dead []reference.Written) ([]reference.Written, []reference.Written)
		opts   reference.Options
		check  func(t *testing.T, r *reference.Report)
		want   string // in the summary; "" means the check passes
		// problems is how many the break makes
		problems int
	}
	cases := []tc{
		{"lost output", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return slices.Delete(out, 5, 6), dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Outputs().Missing) }, "lost: no ", 1},
		{"duplicated output, exactly once", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return append(out, out[7]), dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Outputs().IdenticalDuplicates) }, "duplicated: the ", 1},
		{"duplicated output, at least once", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return append(out, out[7]), dead
		}, atLeastOnce, func(t *testing.T, r *reference.Report) {
			require.Equal(t, 1, r.Outputs().IdenticalDuplicates)
			require.Contains(t, r.Summary(), "1 repeats, each byte-identical")
		}, "", 0},
		{"re-emitted after a crash, at least once", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			// A restart re-emits a run of outputs of one partition after
			// later ones: first copies stay in order.
			return append(out, out[3:9]...), append(dead, dead[1:3]...)
		}, atLeastOnce, func(t *testing.T, r *reference.Report) {
			require.Equal(t, 6, r.Outputs().IdenticalDuplicates)
			require.Equal(t, 2, r.DeadLetters.IdenticalDuplicates)
			require.Zero(t, r.OrderViolations)
		}, "", 0},
		{"conflicting copy, at least once", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			c := out[7]
			c.Value = append(slices.Clone(c.Value[:len(c.Value)-1]), ' ', '}')
			return append(out, c), dead
		}, atLeastOnce, func(t *testing.T, r *reference.Report) {
			require.Equal(t, 1, r.Outputs().ConflictingDuplicates)
			require.Zero(t, r.Outputs().Mismatched, "the first copy is right")
		}, "conflicting copies: ", 1},
		{"changed output", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[3].Value = append(slices.Clone(out[3].Value[:len(out[3].Value)-1]), ' ', '}')
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Outputs().Mismatched) }, "different: ", 1},
		{"changed key", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[3].Key = []byte("someone-else")
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Outputs().Mismatched) }, "different: ", 1},
		{"one key's outputs reordered", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[sk1], out[sk2] = out[sk2], out[sk1]
			return out, dead
		}, atLeastOnce, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.OrderViolations) }, "out of order: ", 1},
		{"one key's outputs reordered, order not checked", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[sk1], out[sk2] = out[sk2], out[sk1]
			return out, dead
		}, reference.Options{}, nil, "", 0},
		{"two keys' outputs reordered, key order", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[dk1], out[dk2] = out[dk2], out[dk1]
			return out, dead
		}, atLeastOnce, nil, "", 0},
		{"two keys' outputs reordered, stage order", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[dk1], out[dk2] = out[dk2], out[dk1]
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.OrderViolations) }, "out of order: ", 1},
		{"output without source", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[0].Headers = nil
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) {
			require.Equal(t, 1, r.Unattributable)
			require.Equal(t, 1, r.Outputs().Missing)
		}, "has no valid differential-source header", 2},
		{"output with a malformed source", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[0].Headers = []chain.Header{{Key: []byte(attribution.SourceHeader), Value: []byte("0/-3")}}
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Unattributable) }, `header ("0/-3")`, 2},
		{"output of an input partition that does not exist", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			out[0].Headers = []chain.Header{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(7, 0)}}
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Unattributable) }, "input partition 7 is not one of the input's 2", 2},
		{"output for an input that has none", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			extra := out[0]
			extra.Headers = []chain.Header{{Key: []byte(attribution.SourceHeader), Value: attribution.SourceValue(0, int64(len(inputs[0])+5))}}
			return append(out, extra), dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Outputs().Unexpected) }, "unexpected: ", 1},
		{"lost dead letter", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return out, slices.Delete(dead, 0, 1)
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.DeadLetters.Missing) }, "lost: no dead letter", 1},
		{"duplicated dead letter", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return out, append(dead, dead[2])
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.DeadLetters.IdenticalDuplicates) }, "duplicated: the dead letter", 1},
		{"dead letter without the original value", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			dead[1].Value = []byte("something else")
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.DeadLetters.Mismatched) }, "does not carry the original key and value", 1},
		{"dead letter of a valid record", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			return out, append(dead, deadLetter(int64(len(dead)), 0, 0, inputs[0][0].Key, inputs[0][0].Value))
		}, reference.Options{}, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.DeadLetters.Unexpected) }, "was dead-lettered", 1},
		{"dead letter without source headers", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			dead[0].Headers = dead[0].Headers[:1]
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.Unattributable) }, "has no valid source headers", 2},
		{"dead letters reordered, stage order", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			dead[0], dead[1] = dead[1], dead[0]
			return out, dead
		}, strict, func(t *testing.T, r *reference.Report) { require.Equal(t, 1, r.OrderViolations) }, "out of order: dead letter", 1},
		{"dead letters reordered, key order", func(out, dead []reference.Written) ([]reference.Written, []reference.Written) {
			dead[0], dead[1] = dead[1], dead[0]
			return out, dead
		}, atLeastOnce, nil, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, dead := c.break_(slices.Clone(good), slices.Clone(goodDead))
			r := exp.Check(out, dead, c.opts)
			if c.check != nil {
				c.check(t, r)
			}
			if c.want == "" {
				require.True(t, r.OK(), r.Summary())
				return
			}
			require.False(t, r.OK())
			require.Error(t, r.Err())
			require.Contains(t, r.Summary(), fmt.Sprintf("FAILED: %d problem(s)", c.problems))
			require.Contains(t, r.Summary(), c.want)
		})
	}
}

func TestCheckBoundsTheProblemsDescribed(t *testing.T) {
	inputs, cfg := checkInput(t)
	_, dead := perfect(inputs, cfg)
	r := reference.Check(inputs, cfg, nil, dead, reference.Options{MaxProblems: 3})
	want := r.Installs.Want + r.Purchases.Want
	require.Equal(t, want, r.Outputs().Missing)
	require.Len(t, r.Problems, 3)
	require.Equal(t, want, r.ProblemCount())
	require.Contains(t, r.Summary(), fmt.Sprintf("FAILED: %d problem(s)", want))
	require.Contains(t, r.Summary(), fmt.Sprintf("... and %d more", want-3))
}

func TestFromMessagesReadsInOrder(t *testing.T) {
	msgs := []chain.Message{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2"),
		Headers: []chain.Header{{Key: []byte("h"), Value: []byte("x")}, {Key: []byte("h"), Value: []byte("y")}}}}
	ws := reference.FromMessages(msgs)
	require.Len(t, ws, 2)
	require.Equal(t, int64(1), ws[1].Offset)
	v, ok := ws[1].Header("h")
	require.True(t, ok)
	require.Equal(t, "y", string(v), "the last header of a name wins")
	_, ok = ws[0].Header("h")
	require.False(t, ok)
}
