package chain

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestKeyGateScenarios runs the key-scoped gate's rule — a leader's
// keyTable, asked by its follower's keyGate — over the scenarios in
// testdata/keygate (pebble's datadriven format; go test ./chain -run
// KeyGateScenarios -rewrite rewrites the expected output). Commands:
//
//	table window=N                  a new table and follower gate
//	begin k=K o=N s=N                the leader begins key K's record at
//	                                 offset o, stream time s before it
//	complete k=K o=N                 the leader completes it
//	check k=K off=N [s=N]            the follower asks: is no record of K
//	                                 pending at offset ≤ off or stream time
//	                                 ≤ s? (no s: the offset rule alone)
//	moved                            the keys handed to the follower, taken
//
// begin and complete print the key's pending records (oldest first, done
// for one completed behind an older pending one); complete prints wake
// when the follower must be woken. Whatever the file says, the test fails
// if a check passes while a record of its key that its rule needs is still
// pending, waits when none is, or a completion's wake differs from
// "the follower waits on the key and its rule now holds".
func TestKeyGateScenarios(t *testing.T) {
	var sc *keyScenario
	datadriven.RunTest(t, "testdata/keygate", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "table" && sc == nil {
			td.Fatalf(t, "%s before table", td.Cmd)
		}
		switch td.Cmd {
		case "table":
			var window int
			td.ScanArgs(t, "window", &window)
			sc = newKeyScenario(window)
			return ""
		case "begin":
			k, o := sc.key(t, td), scanInt(t, td, "o")
			s := scanInt(t, td, "s")
			recs := sc.pending[k]
			if n := len(recs); n > 0 && (recs[n-1].off >= o || recs[n-1].sBefore > s) {
				td.Fatalf(t, "key %s: offsets and stream times of one key are begun in order", sc.name(k))
			}
			sc.tab.begin(k, o, s)
			sc.pending[k] = append(recs, pendingRec{off: o, sBefore: s})
			return sc.show(k)
		case "complete":
			k, o := sc.key(t, td), scanInt(t, td, "o")
			w, watched := sc.watch[k]
			wake := sc.tab.complete(k, o)
			if i := slices.IndexFunc(sc.pending[k], func(r pendingRec) bool { return r.off == o }); i >= 0 {
				sc.pending[k] = slices.Delete(sc.pending[k], i, i+1)
			}
			if want := watched && sc.holds(k, w.off, w.s); wake != want {
				td.Fatalf(t, "complete %s@%d: wake %v, but the follower waits on the key (%v) and its rule holds: %v", sc.name(k), o, wake, watched, want)
			}
			out := sc.show(k)
			if wake {
				delete(sc.watch, k)
				out = "wake\n" + out
			}
			return out
		case "check":
			k, off := sc.key(t, td), scanInt(t, td, "off")
			s := int64(math.MinInt64)
			if td.HasArg("s") {
				s = scanInt(t, td, "s")
			}
			ok, pending, po, ps := sc.tab.check(k, off, s)
			if ok != sc.holds(k, off, s) {
				td.Fatalf(t, "check %s off=%d s=%d: %v, but the records pending are %s", sc.name(k), off, s, ok, sc.show(k))
			}
			if pending != (len(sc.pending[k]) > 0) {
				td.Fatalf(t, "check %s: pending %v, but the records pending are %s", sc.name(k), pending, sc.show(k))
			}
			if !ok {
				sc.watch[k] = want{off: off, s: s}
			}
			switch {
			case !pending:
				return "pass: nothing pending"
			case ok:
				return fmt.Sprintf("pass: oldest pending %d@%d", po, ps)
			}
			return fmt.Sprintf("wait: oldest pending %d@%d", po, ps)
		case "moved":
			var names []string
			for _, k := range sc.gate.moved {
				names = append(names, sc.name(k))
			}
			sc.gate.moved = sc.gate.moved[:0]
			sc.gate.hasMoved.Store(false)
			if len(names) == 0 {
				return "none"
			}
			return strings.Join(names, " ")
		}
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	})
}

// keyScenario is a keyTable under test and the model it is checked
// against: each key's records begun and not completed, and what the
// follower waits for on each key it waits on.
type keyScenario struct {
	tab     *keyTable
	gate    *keyGate
	hashes  map[string]uint64
	names   map[uint64]string
	pending map[uint64][]pendingRec
	watch   map[uint64]want
}

func newKeyScenario(window int) *keyScenario {
	g := newKeyGate(nil, nil)
	return &keyScenario{tab: newKeyTable(window, g), gate: g, hashes: map[string]uint64{},
		names: map[uint64]string{}, pending: map[uint64][]pendingRec{}, watch: map[uint64]want{}}
}

// key is the k argument's hash: one per name, in the order names appear.
func (sc *keyScenario) key(t *testing.T, td *datadriven.TestData) uint64 {
	var name string
	td.ScanArgs(t, "k", &name)
	h, ok := sc.hashes[name]
	if !ok {
		h = uint64(len(sc.hashes) + 1)
		sc.hashes[name], sc.names[h] = h, name
	}
	return h
}

func (sc *keyScenario) name(k uint64) string { return sc.names[k] }

// holds is the rule by the model: no record of k pending at offset ≤ off
// or with stream time before ≤ s.
func (sc *keyScenario) holds(k uint64, off, s int64) bool {
	for _, r := range sc.pending[k] {
		if r.off <= off || r.sBefore <= s {
			return false
		}
	}
	return true
}

// show prints k's records in the table, oldest first.
func (sc *keyScenario) show(k uint64) string {
	p := sc.tab.keys[k]
	if p == nil || p.n == 0 {
		return sc.name(k) + ": none pending"
	}
	var b strings.Builder
	b.WriteString(sc.name(k) + ":")
	for i := range p.n {
		r := p.at(i)
		fmt.Fprintf(&b, " %d@%d", r.off, r.sBefore)
		if r.done {
			b.WriteString(" done")
		}
	}
	return b.String()
}

func scanInt(t *testing.T, td *datadriven.TestData, key string) int64 {
	var v int64
	td.ScanArgs(t, key, &v)
	return v
}
