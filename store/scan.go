package store

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/RaduBerinde/btreemap"
)

// scanner is one ordered range read of a partition: it merges the overlay
// (the keys with pending writes, in mu.keys) with a backend iterator over the
// persisted entries, the overlay winning on equal keys, as get does.
//
// The overlay is read one entry at a time under mu (a seek from the last
// overlay key taken), never across a backend step or a call of fn, so a
// scan does not hold the partition's lock while it reads the backend or runs
// the caller's code.
//
// Iterators are reused: a partition keeps the idle iterators opened at its
// current generation, and a scan takes one (re-bounded) instead of opening
// one. By the argument below an iterator opened at the current generation
// sees exactly what a new one would.
//
// # Why the backend is refreshed when a checkpoint lands
//
// A Pebble iterator reads a snapshot taken when it is created. A key whose
// latest write W is pending sits in the overlay until the checkpoint that
// persists it commits its batch and then drops the key (applied bumps
// mu.gen, then persisted drops the keys). Were the overlay read after the drop and the
// snapshot taken before the commit, W would be in neither, and the scan
// would see an older value. So the scanner records mu.gen when it opens the
// backend iterator and compares it at every overlay read: if a drop
// happened since, it reopens the iterator (a snapshot after the drop, hence
// after the commit) and seeks it back to its position. Keys whose overlay
// state was read before the drop were either in the overlay then (the scan
// uses that value, W's or a later one) or had no pending write (their
// persisted value did not change except by eviction, which only removes
// what no rule can use). The in-memory backend reads the live map, which is
// at least as fresh as any snapshot; the same protocol covers it.
type scanner struct {
	p       *partitionStore
	reverse bool
	// lo and hi bound the user keys; loS and hiS are the same bytes as
	// strings (for the overlay's B-tree; the caller's slices must not change
	// during the scan). hasHi is false for no upper bound.
	lo, hi   []byte
	loS, hiS string
	hasHi    bool
	// elo and ehi bound the backend's entry keys.
	elo, ehi []byte

	be    backendIter
	beOK  bool
	gen   uint64
	fresh bool // the backend must be reopened before its next read

	// The overlay's next candidate: the first overlay key past ovBound in
	// the scan's direction (ovBound unset before the first read).
	ovKey    string
	ovVal    []byte
	ovOK     bool
	ovLoaded bool
	ovDone   bool
	ovBound  string
	ovBegun  bool
	take     func(string, *okey) bool // s.takeOverlay, bound once

	// pos is the last key the scan passed (user key), to reposition the
	// backend after a refresh.
	pos    []byte
	posSet bool
	kbuf   []byte

	// stage and h: a read as of horizon h by stage (h 0: of everything).
	// refreshed: the backend was reopened during the scan, so it may hold
	// an earlier stage's write at or above h of a key the overlay's cursor
	// had passed before the key entered it: backend entries are then
	// checked against the overlay's histories.
	stage     int
	h         int64
	refreshed bool
}

var scanners = sync.Pool{New: func() any {
	s := &scanner{}
	s.take = s.takeOverlay
	return s
}}

func (s *scanner) takeOverlay(k string, o *okey) bool {
	s.ovKey, s.ovVal, s.ovOK = k, o.val, true
	if s.h != 0 && o.hist != nil {
		s.ovVal = o.hist.asOf(s.stage, s.h)
	}
	return false
}

// scan calls fn with every entry whose user key is in [lo, hi) (hi nil: no
// upper bound), in key order (descending if reverse), until fn returns
// false. See StageState.Scan.
func (p *partitionStore) scan(lo, hi []byte, reverse bool, fn func(key, value []byte) bool) (err error) {
	return p.scanAsOf(0, 0, lo, hi, reverse, fn)
}

// scanAsOf is scan as of horizon h by stage (h 0: of everything); see
// StageState.ScanAsOf.
func (p *partitionStore) scanAsOf(stage int, h int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) (err error) {
	if hi != nil && bytes.Compare(lo, hi) >= 0 {
		return nil
	}
	s := scanners.Get().(*scanner)
	defer func() {
		if s.be != nil {
			if cerr := p.putIter(s.be, s.gen); err == nil && cerr != nil {
				err = p.err("scan", cerr)
			}
		}
		s.reset()
		scanners.Put(s)
	}()
	s.init(p, lo, hi, reverse)
	if stage > 0 && h != math.MaxInt64 {
		s.stage, s.h = stage, h
	}
	if err := s.open(); err != nil {
		return err
	}
	return s.run(fn)
}

func (s *scanner) init(p *partitionStore, lo, hi []byte, reverse bool) {
	s.p, s.reverse = p, reverse
	s.lo, s.hi, s.hasHi = lo, hi, hi != nil
	s.loS, s.hiS = unsafeString(lo), unsafeString(hi)
	s.elo = entry(s.elo[:0], p.ks, lo)
	if s.hasHi {
		s.ehi = entry(s.ehi[:0], p.ks, hi)
	} else {
		// Just past every entry key: <prefix>k0 ('0' follows '/').
		s.ehi = append(append(s.ehi[:0], p.ks.prefix...), entryTag, '/'+1)
	}
}

func (s *scanner) reset() {
	take, pos, elo, ehi, kbuf := s.take, s.pos[:0], s.elo[:0], s.ehi[:0], s.kbuf[:0]
	*s = scanner{take: take, pos: pos, elo: elo, ehi: ehi, kbuf: kbuf}
}

// open reads the generation and takes a backend iterator opened at it, or
// opens one after reading it.
func (s *scanner) open() error {
	p := s.p
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return p.err("scan", ErrClosed)
	}
	s.gen = p.mu.gen
	var be backendIter
	if n := len(p.mu.iters); n > 0 {
		be = p.mu.iters[n-1]
		p.mu.iters[n-1] = nil
		p.mu.iters = p.mu.iters[:n-1]
	}
	p.mu.Unlock()
	if be != nil {
		be.setBounds(s.elo, s.ehi)
	} else {
		var err error
		if be, err = p.be.newIter(s.elo, s.ehi); err != nil {
			return p.err("scan", err)
		}
	}
	s.be = be
	s.beOK = s.seekStart()
	return nil
}

// maxCachedIters bounds the idle iterators a partition keeps: about the
// scans that run at once (one per stage, more with key-parallel workers).
const maxCachedIters = 8

// putIter keeps a scan's iterator for the next scan if it was opened at the
// current generation, and closes it otherwise.
func (p *partitionStore) putIter(it backendIter, gen uint64) error {
	p.mu.Lock()
	if !p.mu.closed && gen == p.mu.gen && len(p.mu.iters) < maxCachedIters && it.err() == nil {
		p.mu.iters = append(p.mu.iters, it)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return it.close()
}

// seekStart positions the backend at the first entry in the scan's
// direction, or just past pos when the scan has passed a key.
func (s *scanner) seekStart() bool {
	if !s.posSet {
		if s.reverse {
			return s.be.seekLT(s.ehi)
		}
		return s.be.seekGE(s.elo)
	}
	s.kbuf = entry(s.kbuf[:0], s.p.ks, s.pos)
	if s.reverse {
		return s.be.seekLT(s.kbuf)
	}
	// The first key after pos: pos + 0x00 is the smallest key above it.
	s.kbuf = append(s.kbuf, 0)
	return s.be.seekGE(s.kbuf)
}

// loadOverlay reads the overlay's next candidate under mu and checks the
// generation (see the type's doc).
func (s *scanner) loadOverlay() error {
	p := s.p
	s.ovOK = false
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return p.err("scan", ErrClosed)
	}
	if p.mu.gen != s.gen {
		s.gen, s.fresh = p.mu.gen, true
	}
	if !s.ovBegun {
		p.orderLocked(s.loS, s.hiS, s.hasHi)
	}
	t := p.mu.keys
	switch {
	case s.reverse && s.ovBegun:
		t.DescendFunc(btreemap.LT(s.ovBound), btreemap.GE(s.loS), s.take)
	case s.reverse && s.hasHi:
		t.DescendFunc(btreemap.LT(s.hiS), btreemap.GE(s.loS), s.take)
	case s.reverse:
		t.DescendFunc(btreemap.Max[string](), btreemap.GE(s.loS), s.take)
	case s.ovBegun && s.hasHi:
		t.AscendFunc(btreemap.GT(s.ovBound), btreemap.LT(s.hiS), s.take)
	case s.ovBegun:
		t.AscendFunc(btreemap.GT(s.ovBound), btreemap.Max[string](), s.take)
	case s.hasHi:
		t.AscendFunc(btreemap.GE(s.loS), btreemap.LT(s.hiS), s.take)
	default:
		t.AscendFunc(btreemap.GE(s.loS), btreemap.Max[string](), s.take)
	}
	p.mu.Unlock()
	s.ovLoaded, s.ovBegun = true, true
	if s.ovOK {
		s.ovBound = s.ovKey
	} else {
		s.ovDone = true
	}
	return nil
}

// refresh reopens the backend iterator at the latest state and seeks it
// back to the scan's position.
func (s *scanner) refresh() error {
	s.fresh, s.refreshed = false, true
	if err := s.be.refresh(); err != nil {
		return s.p.err("scan", err)
	}
	s.beOK = s.seekStart()
	return nil
}

func (s *scanner) run(fn func(key, value []byte) bool) error {
	plen := len(s.p.ks.prefix) + 2
	for {
		if !s.ovLoaded && !s.ovDone {
			if err := s.loadOverlay(); err != nil {
				return err
			}
		}
		if s.fresh {
			if err := s.refresh(); err != nil {
				return err
			}
		}
		if !s.beOK {
			if err := s.be.err(); err != nil {
				return s.p.err("scan", err)
			}
		}
		var beKey []byte
		if s.beOK {
			beKey = s.be.key()[plen:]
		}
		c := 0 // < 0: the overlay's key comes first; > 0: the backend's
		switch {
		case s.ovOK && s.beOK:
			c = strings.Compare(s.ovKey, unsafeString(beKey))
			if s.reverse {
				c = -c
			}
		case s.ovOK:
			c = -1
		case s.beOK:
			c = 1
		default:
			return nil
		}
		if c <= 0 {
			// The overlay's entry (on equal keys it shadows the backend's).
			key, val := s.ovKey, s.ovVal
			s.ovLoaded = false
			if c == 0 {
				s.beOK = s.step()
			}
			s.setPos(unsafeBytes(key))
			if val == nil || isHistKey(key) {
				continue // a pending delete
			}
			if !fn(unsafeBytes(key), val[:len(val):len(val)]) {
				return nil
			}
			continue
		}
		s.setPos(beKey)
		enc := s.be.value()
		if enc == nil {
			if err := s.be.err(); err != nil {
				return s.p.err("scan", err)
			}
		}
		if len(enc) < expiryLen {
			return s.p.err("scan", fmt.Errorf("%w: entry %q has %d bytes", ErrCorrupt, beKey, len(enc)))
		}
		val := userValue(enc)
		if s.h != 0 && s.refreshed {
			var ok bool
			if val, ok = s.p.histAsOf(beKey, s.stage, s.h, val); !ok {
				s.beOK = s.step()
				continue
			}
		}
		if !isHistKey(beKey) && !fn(beKey, val) {
			return nil
		}
		s.beOK = s.step()
	}
}

func (s *scanner) step() bool {
	if s.reverse {
		return s.be.prev()
	}
	return s.be.next()
}

func (s *scanner) setPos(k []byte) {
	s.pos = append(s.pos[:0], k...)
	s.posSet = true
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// unsafeBytes views s as a byte slice without copying; it must not be
// modified.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
