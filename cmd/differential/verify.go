package main

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// readRecord is a record read back from the output or dead-letter topic.
type readRecord struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// verification is the outcome of comparing what the engine wrote with what
// the reference model (reference.Run, an independent implementation of
// DESIGN §5) prescribes for the same input.
type verification struct {
	Partitions int
	// Observed, distinct by source record.
	Installs, Purchases, DeadLettered int
	// Prescribed by the reference model.
	WantInstalls, WantPurchases, WantInvalid, Duplicates int

	Problems []string
	omitted  int
}

// maxProblems bounds the problems kept for the report.
const maxProblems = 20

func (v *verification) OK() bool { return len(v.Problems) == 0 && v.omitted == 0 }

func (v *verification) problemf(format string, args ...any) {
	if len(v.Problems) >= maxProblems {
		v.omitted++
		return
	}
	v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
}

// Summary is the verification's report text.
func (v *verification) Summary() string {
	if v.OK() {
		return fmt.Sprintf("OK: in all %d partitions the outputs equal the reference model's record for record, "+
			"per stage in offset order (nothing lost, nothing duplicated), and every invalid record was dead-lettered once", v.Partitions)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED: %d problem(s)", len(v.Problems)+v.omitted)
	for _, p := range v.Problems {
		b.WriteString("\n    - " + p)
	}
	if v.omitted > 0 {
		fmt.Fprintf(&b, "\n    ... and %d more", v.omitted)
	}
	return b.String()
}

// item is one output of one stage for one source record.
type item struct {
	src        int64 // source offset
	key, value []byte
	at         string // where it was read: topic partition@offset
}

// verify compares outputs and dead letters with reference.Run over each
// input partition (inputs[p] holds partition p's records). Outputs are
// matched to their input record by the differential-source header; per
// stage and partition they must equal the reference's outputs exactly once
// each, and in every output partition the outputs of one stage for one key
// must appear in source offset order (what ordering a key-parallel stage
// keeps). Dead letters are matched by their source headers and must be the
// reference's invalid records, once each, with the original value.
func verify(inputs [][]chain.Record, cfg attribution.Config, outputs, dlq []readRecord) *verification {
	v := &verification{Partitions: len(inputs)}
	refs := make([]reference.Result, len(inputs))
	for p, recs := range inputs {
		refs[p] = reference.Run(recs, cfg)
		v.WantInstalls += len(refs[p].Installs)
		v.WantPurchases += len(refs[p].Purchases)
		v.WantInvalid += len(refs[p].Invalid)
		v.Duplicates += len(refs[p].Duplicates)
	}
	installs, purchases := v.classify(outputs, len(inputs))
	dead := v.deadLetters(dlq, len(inputs))
	for p := range inputs {
		v.Installs += v.compare("install", int32(p), refs[p].Installs, installs[p])
		v.Purchases += v.compare("purchase", int32(p), refs[p].Purchases, purchases[p])
		v.DeadLettered += v.compareDead(int32(p), inputs[p], refs[p].Invalid, dead[p])
	}
	v.checkOrder(outputs)
	return v
}

// classify groups outputs by kind and source partition.
func (v *verification) classify(outputs []readRecord, partitions int) (installs, purchases [][]item) {
	installs, purchases = make([][]item, partitions), make([][]item, partitions)
	for _, r := range outputs {
		at := fmt.Sprintf("output %d@%d", r.Partition, r.Offset)
		p, o, ok := parseSource(r.Headers[attribution.SourceHeader])
		if !ok || int(p) >= partitions {
			v.problemf("%s has no valid %s header (%q)", at, attribution.SourceHeader, r.Headers[attribution.SourceHeader])
			continue
		}
		it := item{src: o, key: r.Key, value: r.Value, at: at}
		switch kindOf(r.Value) {
		case "install":
			installs[p] = append(installs[p], it)
		case "purchase":
			purchases[p] = append(purchases[p], it)
		default:
			v.problemf("%s is neither an install nor a purchase output: %s", at, clip(r.Value))
		}
	}
	return installs, purchases
}

func kindOf(value []byte) string {
	switch {
	case bytes.HasPrefix(value, []byte(`{"kind":"install"`)):
		return "install"
	case bytes.HasPrefix(value, []byte(`{"kind":"purchase"`)):
		return "purchase"
	}
	return ""
}

// parseSource parses "<partition>/<offset>".
func parseSource(s string) (int32, int64, bool) {
	ps, offs, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, false
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(offs, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return 0, 0, false
	}
	return int32(p), o, true
}

// compare matches one stage's outputs of one source partition with the
// reference's, by source offset; it returns how many distinct source
// records had an output.
func (v *verification) compare(stage string, p int32, want []reference.Output, got []item) int {
	slices.SortStableFunc(got, func(a, b item) int { return cmpInt(a.src, b.src) })
	i, distinct := 0, 0
	for j := 0; j < len(got); {
		g := got[j]
		n := 1
		for j+n < len(got) && got[j+n].src == g.src {
			n++
		}
		j += n
		distinct++
		if n > 1 {
			v.problemf("duplicated: the %s output of input %d@%d appears %d times (first at %s)", stage, p, g.src, n, g.at)
		}
		for i < len(want) && want[i].Offset < g.src {
			v.problemf("lost: no %s output for input %d@%d (want %s)", stage, p, want[i].Offset, clip(want[i].Value))
			i++
		}
		if i == len(want) || want[i].Offset != g.src {
			v.problemf("unexpected: %s output for input %d@%d at %s, the reference has none: %s", stage, p, g.src, g.at, clip(g.value))
			continue
		}
		if !bytes.Equal(want[i].Key, g.key) || !bytes.Equal(want[i].Value, g.value) {
			v.problemf("different: %s output for input %d@%d at %s\n        got  %s %s\n        want %s %s",
				stage, p, g.src, g.at, g.key, clip(g.value), want[i].Key, clip(want[i].Value))
		}
		i++
	}
	for ; i < len(want); i++ {
		v.problemf("lost: no %s output for input %d@%d (want %s)", stage, p, want[i].Offset, clip(want[i].Value))
	}
	return distinct
}

// checkOrder checks that, read in log order, each output partition holds the
// outputs of one stage for one key in increasing source offset order.
func (v *verification) checkOrder(outputs []readRecord) {
	type k struct {
		part, src int32
		kind, key string
	}
	last := map[k]int64{}
	for _, r := range outputs {
		p, o, ok := parseSource(r.Headers[attribution.SourceHeader])
		if !ok {
			continue
		}
		key := k{r.Partition, p, kindOf(r.Value), string(r.Key)}
		if prev, seen := last[key]; seen && o < prev {
			v.problemf("out of order: output %d@%d (%s of input %d@%d, key %s) comes after the output of input %d@%d",
				r.Partition, r.Offset, key.kind, p, o, r.Key, p, prev)
		}
		last[key] = max(last[key], o)
	}
}

// deadLetters groups dead letters by source partition.
func (v *verification) deadLetters(dlq []readRecord, partitions int) [][]item {
	out := make([][]item, partitions)
	for _, r := range dlq {
		at := fmt.Sprintf("dead letter %d@%d", r.Partition, r.Offset)
		p, o, ok := parseSource(r.Headers[chain.HeaderDLQPartition] + "/" + r.Headers[chain.HeaderDLQOffset])
		if !ok || int(p) >= partitions {
			v.problemf("%s has no valid source headers", at)
			continue
		}
		out[p] = append(out[p], item{src: o, key: r.Key, value: r.Value, at: at + " (" + r.Headers[chain.HeaderDLQReason] + ")"})
	}
	return out
}

// compareDead matches one partition's dead letters with the reference's
// invalid records; the dead letter must carry the original key and value.
func (v *verification) compareDead(p int32, inputs []chain.Record, want []reference.Invalid, got []item) int {
	byOffset := make(map[int64]*chain.Record, len(want))
	exp := make([]reference.Output, len(want))
	for i, w := range want {
		exp[i] = reference.Output{Partition: p, Offset: w.Offset}
		byOffset[w.Offset] = nil
	}
	for i := range inputs {
		if _, ok := byOffset[inputs[i].Offset]; ok {
			byOffset[inputs[i].Offset] = &inputs[i]
		}
	}
	for i := range exp {
		if r := byOffset[exp[i].Offset]; r != nil {
			exp[i].Key, exp[i].Value = r.Key, r.Value
		}
	}
	return v.compare("dead-letter", p, exp, got)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// clip shortens a value for a report line.
func clip(b []byte) string {
	const n = 160
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("... (%d bytes)", len(b))
}
