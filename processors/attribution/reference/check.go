package reference

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// Written is one record read back from an output or dead-letter topic (see
// FromKafka and FromMessages).
type Written struct {
	// Partition and Offset are where it was read: partition of the output
	// or dead-letter topic, and offset there. Check reads the order of a
	// partition's records from their order in the slice it is given, and
	// uses Offset only to name a record in problems.
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []chain.Header
}

// Header returns the value of the last header named key.
func (w *Written) Header(key string) ([]byte, bool) {
	for i := len(w.Headers) - 1; i >= 0; i-- {
		if string(w.Headers[i].Key) == key {
			return w.Headers[i].Value, true
		}
	}
	return nil, false
}

// Duplicates says which repeated records (two or more written for one input
// record) a check accepts.
type Duplicates int

const (
	// NoDuplicates: every output and dead letter is written exactly once (a
	// run without crashes; exactly-once delivery).
	NoDuplicates Duplicates = iota
	// IdenticalDuplicates: further copies are accepted when their key and
	// value are byte-identical to the first copy's (at-least-once delivery:
	// a crash or a partition move re-emits, but never a different answer).
	IdenticalDuplicates
)

// Order says which order of the written records a check requires. It is
// checked within each partition the records were read from, in the order
// they were read, over the first copy of each record (a re-emitted copy
// repeats an earlier output and is judged by Duplicates).
type Order int

const (
	// AnyOrder checks no order.
	AnyOrder Order = iota
	// KeyOrder: one key's outputs of one stage from one input partition
	// are in input offset order — what a key-parallel stage keeps
	// (Stage.KeyConcurrency > 1). Dead letters are not ordered.
	KeyOrder
	// StageOrder: all outputs of one stage from one input partition, and
	// all dead letters of one input partition, are in input offset order —
	// what a stage in strict partition order writes (KeyConcurrency ≤ 1).
	StageOrder
)

// Options say what a check accepts. The zero value accepts no duplicate
// and checks no order.
type Options struct {
	Duplicates Duplicates
	Order      Order
	// MaxProblems bounds the problem lines a Report keeps (the counts are
	// always complete). Default 20.
	MaxProblems int
}

// Counts are a check's results for one kind of written record (install
// outputs, purchase outputs or dead letters), counted by input record.
type Counts struct {
	// Want is how many the model prescribes.
	Want int
	// Matched inputs have a first written copy equal (key and value) to the
	// model's record; Mismatched ones have a first copy that differs.
	Matched, Mismatched int
	// Missing is how many of the model's records were not written at all.
	Missing int
	// Unexpected inputs had a record written where the model has none.
	Unexpected int
	// IdenticalDuplicates and ConflictingDuplicates count the copies after
	// the first: byte-identical to it (key and value) or not.
	IdenticalDuplicates, ConflictingDuplicates int
}

// Distinct is how many input records had a record written.
func (c Counts) Distinct() int { return c.Matched + c.Mismatched + c.Unexpected }

func (c Counts) String() string {
	return fmt.Sprintf("want %d: matched %d, different %d, missing %d, unexpected %d, repeats %d identical + %d conflicting",
		c.Want, c.Matched, c.Mismatched, c.Missing, c.Unexpected, c.IdenticalDuplicates, c.ConflictingDuplicates)
}

func (c *Counts) add(o Counts) {
	c.Want += o.Want
	c.Matched += o.Matched
	c.Mismatched += o.Mismatched
	c.Missing += o.Missing
	c.Unexpected += o.Unexpected
	c.IdenticalDuplicates += o.IdenticalDuplicates
	c.ConflictingDuplicates += o.ConflictingDuplicates
}

// Report is the outcome of Check: the written records against the model,
// counted per kind, with the first problems described.
type Report struct {
	Options    Options
	Partitions int // input partitions
	Installs   Counts
	Purchases  Counts
	// Alerts are the velocity stage's (Config.Velocity); Check attributes
	// them like outputs, so pass the alerts topic's records with the
	// outputs when it differs from the output topic.
	Alerts Counts
	// DeadLetters: Matched dead letters carry the invalid record's
	// original key and value, Mismatched ones do not; Unexpected ones are
	// of records the model finds valid.
	DeadLetters Counts
	// Skipped is how many valid input records the model finds to be
	// duplicates (they have no output).
	Skipped int
	// OutputsRead and DeadLettersRead count every record given to Check.
	OutputsRead, DeadLettersRead int
	// Unattributable records name no input record: no or a malformed
	// source header, an input partition the input does not have, or an
	// output that is neither an install, a purchase nor a velocity alert
	// and that the model does not expect.
	Unattributable int
	// OrderViolations counts first copies that come after a record they
	// must precede (see Order).
	OrderViolations int
	// Problems describes the first problems found (Options.MaxProblems).
	Problems []string
	omitted  int
}

// Outputs sums the install, purchase and alert counts.
func (r *Report) Outputs() Counts {
	c := r.Installs
	c.add(r.Purchases)
	c.add(r.Alerts)
	return c
}

// ProblemCount is the number of problems, described or not.
func (r *Report) ProblemCount() int { return len(r.Problems) + r.omitted }

// OK reports whether nothing is missing, different, unexpected,
// unattributable or out of order, and no copy is refused by
// Options.Duplicates.
func (r *Report) OK() bool { return r.ProblemCount() == 0 }

// Err is nil when OK, else an error whose text is Summary.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	return errors.New(r.Summary())
}

// Summary is the report as text: one line when OK, else the problem count,
// the counts per kind and the problems, one per line.
func (r *Report) Summary() string {
	if r.OK() {
		o := r.Outputs()
		s := fmt.Sprintf("OK: in all %d partitions the outputs equal the reference model's record for record "+
			"(%d installs, %d purchases) and every invalid record was dead-lettered (%d)",
			r.Partitions, r.Installs.Matched, r.Purchases.Matched, r.DeadLetters.Matched)
		if r.Alerts.Want > 0 {
			s += fmt.Sprintf("; velocity alerts equal too (%d)", r.Alerts.Matched)
		}
		if n := o.IdenticalDuplicates + r.DeadLetters.IdenticalDuplicates; n > 0 {
			s += fmt.Sprintf("; nothing lost, %d repeats, each byte-identical to its first copy", n)
		} else {
			s += ", once each: nothing lost, nothing duplicated"
		}
		switch r.Options.Order {
		case KeyOrder:
			s += "; one key's outputs of a stage in input offset order"
		case StageOrder:
			s += "; each stage's outputs and the dead letters in input offset order"
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED: %d problem(s)", r.ProblemCount())
	fmt.Fprintf(&b, "\n    installs      %s\n    purchases     %s", r.Installs, r.Purchases)
	if r.Alerts.Want+r.Alerts.Distinct() > 0 {
		fmt.Fprintf(&b, "\n    alerts        %s", r.Alerts)
	}
	fmt.Fprintf(&b, "\n    dead letters  %s", r.DeadLetters)
	if r.Unattributable+r.OrderViolations > 0 {
		fmt.Fprintf(&b, "\n    unattributable %d, out of order %d", r.Unattributable, r.OrderViolations)
	}
	for _, p := range r.Problems {
		b.WriteString("\n    - " + p)
	}
	if r.omitted > 0 {
		fmt.Fprintf(&b, "\n    ... and %d more", r.omitted)
	}
	return b.String()
}

func (r *Report) problemf(format string, args ...any) {
	limit := r.Options.MaxProblems
	if limit <= 0 {
		limit = 20
	}
	if len(r.Problems) >= limit {
		r.omitted++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Expectation is what the model prescribes for one topic's input — Run over
// every partition's log — ready to check what an engine wrote, any number
// of times. It is not modified by Check and may be shared.
type Expectation struct {
	results []Result
	// per input partition, by input offset
	outputs []map[int64]want
	invalid []map[int64]want
}

// want is one record the model prescribes.
type want struct {
	kind       string // kindInstall, kindPurchase, kindDeadLetter
	key, value []byte
	reason     string // dead letters
}

const (
	kindInstall    = "install"
	kindPurchase   = "purchase"
	kindAlert      = attribution.AlertKind
	kindDeadLetter = "dead letter"
)

// Expect runs the model over inputs, where inputs[p] holds the records of
// input partition p (any order).
func Expect(inputs [][]chain.Record, cfg attribution.Config) *Expectation {
	e := &Expectation{
		results: make([]Result, len(inputs)),
		outputs: make([]map[int64]want, len(inputs)),
		invalid: make([]map[int64]want, len(inputs)),
	}
	for p, recs := range inputs {
		res := Run(recs, cfg)
		e.results[p] = res
		outs := make(map[int64]want, len(res.Installs)+len(res.Purchases))
		for _, o := range res.Installs {
			outs[o.Offset] = want{kind: kindInstall, key: o.Key, value: o.Value}
		}
		for _, o := range res.Purchases {
			outs[o.Offset] = want{kind: kindPurchase, key: o.Key, value: o.Value}
		}
		for _, o := range res.Alerts { // clicks: no other output at their offsets
			outs[o.Offset] = want{kind: kindAlert, key: o.Key, value: o.Value}
		}
		e.outputs[p] = outs
		inv := make(map[int64]want, len(res.Invalid))
		for _, x := range res.Invalid {
			inv[x.Offset] = want{kind: kindDeadLetter, reason: x.Reason}
		}
		for i := range recs {
			if w, ok := inv[recs[i].Offset]; ok {
				w.key, w.value = recs[i].Key, recs[i].Value
				inv[recs[i].Offset] = w
			}
		}
		e.invalid[p] = inv
	}
	return e
}

// Results returns the model's result for every input partition (indexed
// like Expect's inputs); the caller must not modify them.
func (e *Expectation) Results() []Result { return e.results }

// Check runs the model over inputs and checks outputs and dead letters
// against it: Expect(inputs, cfg).Check(outputs, deadLetters, o).
func Check(inputs [][]chain.Record, cfg attribution.Config, outputs, deadLetters []Written, o Options) *Report {
	return Expect(inputs, cfg).Check(outputs, deadLetters, o)
}

// source is an input record: partition and offset.
type source struct {
	p int32
	o int64
}

// copyOf is one written record attributed to its input record.
type copyOf struct {
	src  source
	w    *Written
	kind string // of the value (outputs), kindDeadLetter
}

// Check compares what an engine wrote with the model. outputs are the
// records read back from the output topic, deadLetters those of the
// dead-letter topic, each partition's in the order read (FromKafka gives
// that). Each output is attributed to its input record by the
// attribution.SourceHeader header, each dead letter by chain's
// HeaderDLQPartition and HeaderDLQOffset headers; then per input record:
//
//   - the model's output (or, for an invalid record, its dead letter with
//     the original key and value) must be written: else Missing;
//   - the first copy must equal it, key and value: else Mismatched;
//   - a record written for an input the model gives none is Unexpected;
//   - further copies are counted as identical or conflicting duplicates and
//     accepted as o.Duplicates says;
//   - first copies must keep o.Order.
func (e *Expectation) Check(outputs, deadLetters []Written, o Options) *Report {
	r := &Report{Options: o, Partitions: len(e.results), OutputsRead: len(outputs), DeadLettersRead: len(deadLetters)}
	for _, res := range e.results {
		r.Installs.Want += len(res.Installs)
		r.Purchases.Want += len(res.Purchases)
		r.Alerts.Want += len(res.Alerts)
		r.DeadLetters.Want += len(res.Invalid)
		r.Skipped += len(res.Duplicates)
	}
	outs := e.attribute(r, outputs, false)
	dead := e.attribute(r, deadLetters, true)
	for p := range e.results {
		e.compare(r, int32(p), e.outputs[p], outs)
		e.compare(r, int32(p), e.invalid[p], dead)
	}
	e.unexpected(r, outs)
	e.unexpected(r, dead)
	if o.Order != AnyOrder {
		checkOrder(r, outputs, o.Order, false)
		if o.Order == StageOrder {
			checkOrder(r, deadLetters, o.Order, true)
		}
	}
	return r
}

// attribute groups written records by input record, in the order given;
// records that name none are counted and described.
func (e *Expectation) attribute(r *Report, ws []Written, dead bool) map[source][]copyOf {
	by := map[source][]copyOf{}
	for i := range ws {
		w := &ws[i]
		src, err := sourceOf(w, dead)
		if err == nil && (src.p < 0 || int(src.p) >= len(e.results)) {
			err = fmt.Errorf("input partition %d is not one of the input's %d", src.p, len(e.results))
		}
		if err != nil {
			r.Unattributable++
			r.problemf("%s: %v", where(w, dead), err)
			continue
		}
		k := kindDeadLetter
		if !dead {
			k = kindOf(w.Value)
		}
		by[src] = append(by[src], copyOf{src: src, w: w, kind: k})
	}
	return by
}

// sourceOf reads the input record a written record names.
func sourceOf(w *Written, dead bool) (source, error) {
	if !dead {
		v, ok := w.Header(attribution.SourceHeader)
		if !ok {
			return source{}, fmt.Errorf("has no valid %s header (none)", attribution.SourceHeader)
		}
		p, o, err := attribution.ParseSource(v)
		if err != nil {
			return source{}, fmt.Errorf("has no valid %s header (%q)", attribution.SourceHeader, v)
		}
		return source{p, o}, nil
	}
	pv, _ := w.Header(chain.HeaderDLQPartition)
	ov, _ := w.Header(chain.HeaderDLQOffset)
	p, err1 := strconv.ParseInt(string(pv), 10, 32)
	o, err2 := strconv.ParseInt(string(ov), 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return source{}, fmt.Errorf("has no valid source headers (%s %q, %s %q)", chain.HeaderDLQPartition, pv, chain.HeaderDLQOffset, ov)
	}
	return source{int32(p), o}, nil
}

// kindOf is the kind of an output value, "" if neither.
func kindOf(value []byte) string {
	switch {
	case bytes.HasPrefix(value, []byte(`{"kind":"install"`)):
		return kindInstall
	case bytes.HasPrefix(value, []byte(`{"kind":"purchase"`)):
		return kindPurchase
	case bytes.HasPrefix(value, []byte(`{"kind":"`+attribution.AlertKind+`"`)):
		return kindAlert
	}
	return ""
}

func (r *Report) counts(kind string) *Counts {
	switch kind {
	case kindInstall:
		return &r.Installs
	case kindPurchase:
		return &r.Purchases
	case kindAlert:
		return &r.Alerts
	}
	return &r.DeadLetters
}

// what names a kind of record in problems.
func what(kind string) string {
	switch kind {
	case kindDeadLetter:
		return "dead letter"
	case kindAlert:
		return "velocity alert"
	}
	return kind + " output"
}

func where(w *Written, dead bool) string {
	if dead {
		return fmt.Sprintf("dead letter %d@%d", w.Partition, w.Offset)
	}
	return fmt.Sprintf("output %d@%d", w.Partition, w.Offset)
}

// compare matches the model's records of input partition p (wants, by
// offset) with the copies written for them, and removes those from got.
func (e *Expectation) compare(r *Report, p int32, wants map[int64]want, got map[source][]copyOf) {
	for _, off := range sortedKeys(wants) {
		wt := wants[off]
		src := source{p, off}
		c := r.counts(wt.kind)
		copies := got[src]
		delete(got, src)
		if len(copies) == 0 {
			c.Missing++
			if wt.kind == kindDeadLetter {
				r.problemf("lost: no dead letter for input %d@%d (invalid: %s)", p, off, wt.reason)
			} else {
				r.problemf("lost: no %s for input %d@%d (want %s)", what(wt.kind), p, off, clip(wt.value))
			}
			continue
		}
		first := copies[0].w
		switch {
		case bytes.Equal(first.Key, wt.key) && bytes.Equal(first.Value, wt.value):
			c.Matched++
		case wt.kind == kindDeadLetter:
			c.Mismatched++
			r.problemf("different: the dead letter of input %d@%d at %s does not carry the original key and value", p, off, where(first, true))
		default:
			c.Mismatched++
			r.problemf("different: %s for input %d@%d at %s\n        got  %s %s\n        want %s %s",
				what(wt.kind), p, off, where(first, false), first.Key, clip(first.Value), wt.key, clip(wt.value))
		}
		r.repeats(c, wt.kind, copies)
	}
}

// repeats counts and judges the copies after the first.
func (r *Report) repeats(c *Counts, kind string, copies []copyOf) {
	if len(copies) < 2 {
		return
	}
	first := copies[0].w
	identical, conflicting := 0, 0
	var differing *Written
	for _, cp := range copies[1:] {
		if bytes.Equal(cp.w.Key, first.Key) && bytes.Equal(cp.w.Value, first.Value) {
			identical++
		} else {
			conflicting++
			if differing == nil {
				differing = cp.w
			}
		}
	}
	c.IdenticalDuplicates += identical
	c.ConflictingDuplicates += conflicting
	src, dead := copies[0].src, kind == kindDeadLetter
	switch {
	case conflicting > 0:
		r.problemf("conflicting copies: the %s of input %d@%d at %s differs from its first copy at %s\n        first %s %s\n        later %s %s",
			what(kind), src.p, src.o, where(differing, dead), where(first, dead), first.Key, clip(first.Value), differing.Key, clip(differing.Value))
	case r.Options.Duplicates == NoDuplicates:
		r.problemf("duplicated: the %s of input %d@%d appears %d times (first at %s, again at %s)",
			what(kind), src.p, src.o, len(copies), where(first, dead), where(copies[1].w, dead))
	}
}

// unexpected counts and describes what was written for inputs the model
// gives none (what compare left in got).
func (e *Expectation) unexpected(r *Report, got map[source][]copyOf) {
	srcs := make([]source, 0, len(got))
	for s := range got {
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, func(a, b source) int { return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.o, b.o)) })
	for _, src := range srcs {
		copies := got[src]
		first := copies[0]
		switch first.kind {
		case "":
			r.Unattributable++
			r.problemf("unexpected: %s for input %d@%d is neither an install, a purchase nor a velocity alert, and the reference has none: %s",
				where(first.w, false), src.p, src.o, clip(first.w.Value))
			continue
		case kindDeadLetter:
			r.problemf("unexpected: input %d@%d was dead-lettered (%s) but the reference has it valid (or it is not in the input)",
				src.p, src.o, where(first.w, true))
		default:
			r.problemf("unexpected: %s for input %d@%d at %s, the reference has none: %s",
				what(first.kind), src.p, src.o, where(first.w, false), clip(first.w.Value))
		}
		c := r.counts(first.kind)
		c.Unexpected++
		r.repeats(c, first.kind, copies)
	}
}

// checkOrder checks the order of first copies within each partition read.
func checkOrder(r *Report, ws []Written, order Order, dead bool) {
	type group struct {
		part, src int32
		kind, key string
	}
	last := map[group]int64{}
	seen := map[source]bool{}
	for i := range ws {
		w := &ws[i]
		src, err := sourceOf(w, dead)
		if err != nil || seen[src] {
			continue
		}
		seen[src] = true
		g := group{part: w.Partition, src: src.p, kind: kindDeadLetter}
		if !dead {
			g.kind = kindOf(w.Value)
		}
		if order == KeyOrder {
			g.key = string(w.Key)
		}
		if prev, ok := last[g]; ok && src.o < prev {
			r.OrderViolations++
			if order == KeyOrder {
				r.problemf("out of order: %s (%s of input %d@%d, key %s) comes after the one of input %d@%d",
					where(w, dead), what(g.kind), src.p, src.o, w.Key, src.p, prev)
			} else {
				r.problemf("out of order: %s (%s of input %d@%d) comes after the one of input %d@%d",
					where(w, dead), what(g.kind), src.p, src.o, src.p, prev)
			}
		}
		last[g] = max(last[g], src.o)
	}
}

func sortedKeys(m map[int64]want) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// clip shortens a value for a problem line.
func clip(b []byte) string {
	const n = 160
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("... (%d bytes)", len(b))
}
