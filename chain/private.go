package chain

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ErrPrivateKey is what a stage's state access returns (wrapped, with the
// key and the owning stage, and Fatal: the partition stops) when it touches
// a key under another stage's Private prefixes: that stage's entries are
// evicted at its own watermark, so what another stage would read of them
// would depend on how far the owner had run.
var ErrPrivateKey = errors.New("chain: key is private to another stage")

// PrivateEvicter is a PartitionStore that evicts each stage's private
// entries (Stage.Private) at that stage's own watermark: an entry under
// prefixes[i] whose expiry is at or before stage i's checkpointed
// watermark (less a nanosecond, as EvictBefore) is deleted, or never
// written, by the checkpoint, even when the slowest stage is behind. The
// chain calls EvictPrivate once on every partition it opens, before any
// other use, with one list per stage in stage order. A PartitionStore that
// wraps another forwards it; one that does not implement it evicts private
// entries with the others, at the slowest stage's watermark: later, never
// wrongly.
type PrivateEvicter interface {
	EvictPrivate(prefixes [][]string)
}

// validatePrivate refuses empty prefixes and prefixes of two stages that
// overlap (one a prefix of the other): a key must have at most one owner.
func validatePrivate(stages []Stage) error {
	for i, s := range stages {
		for _, p := range s.Private {
			if p == "" {
				return fmt.Errorf("chain: stage %q: an empty Private prefix would make every key private", s.Name)
			}
			for _, o := range stages[i+1:] {
				for _, q := range o.Private {
					if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
						return fmt.Errorf("chain: Private prefixes %q of stage %q and %q of stage %q overlap: a key must have at most one owner", p, s.Name, q, o.Name)
					}
				}
			}
		}
	}
	return nil
}

// privatePrefixes returns each stage's Private prefixes in stage order, or
// nil when no stage has any.
func privatePrefixes(stages []Stage) [][]string {
	var out [][]string
	for i, s := range stages {
		if len(s.Private) == 0 {
			continue
		}
		if out == nil {
			out = make([][]string, len(stages))
		}
		out[i] = s.Private
	}
	return out
}

// foreignKeys is what one stage may not touch: the Private prefixes of the
// other stages. A nil *foreignKeys allows everything.
type foreignKeys struct {
	prefixes [][]byte
	// ends[i] is the least key above every key under prefixes[i] (nil:
	// none, the prefix is all 0xff bytes).
	ends   [][]byte
	owners []string
}

// foreignTo returns the prefixes of the stages other than stage, nil if
// there are none.
func foreignTo(stages []Stage, stage int) *foreignKeys {
	var f *foreignKeys
	for i, s := range stages {
		if i == stage {
			continue
		}
		for _, p := range s.Private {
			if f == nil {
				f = &foreignKeys{}
			}
			f.prefixes = append(f.prefixes, []byte(p))
			f.ends = append(f.ends, prefixEnd([]byte(p)))
			f.owners = append(f.owners, s.Name)
		}
	}
	return f
}

// key checks one key.
func (f *foreignKeys) key(key []byte) error {
	if f == nil {
		return nil
	}
	for i, p := range f.prefixes {
		if bytes.HasPrefix(key, p) {
			return Fatal(fmt.Errorf("%w: %q is under %q of stage %q", ErrPrivateKey, key, p, f.owners[i]))
		}
	}
	return nil
}

// span checks a range read of [lo, hi) (hi nil: unbounded).
func (f *foreignKeys) span(lo, hi []byte) error {
	if f == nil {
		return nil
	}
	for i, p := range f.prefixes {
		end := f.ends[i]
		if (end == nil || bytes.Compare(lo, end) < 0) && (hi == nil || bytes.Compare(p, hi) < 0) {
			return Fatal(fmt.Errorf("%w: the range [%q, %q) covers keys under %q of stage %q", ErrPrivateKey, lo, hi, p, f.owners[i]))
		}
	}
	return nil
}

// prefixEnd is the least key above every key with prefix p, nil if none.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
