package window

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/differential-dev/differential/chain"
)

// KeyPrefix starts every state key of every Counter: "w/<Name>/<key>".
const KeyPrefix = "w/"

// Counter is a rolling per-key counter over event time whose state lives in
// the chain's store (see the package doc for the rule and its exactness).
// It is safe for concurrent use by the records of one stage, also
// key-parallel ones (KeyConcurrency > 1) when records with the same counter
// key always have the same Kafka key. Use one Counter per stage.
type Counter struct {
	cfg    Config
	prefix string
	w, b   int64 // Window, Bucket in ns
	span   int64 // Window+Lateness in ns
	late   int64 // Lateness in ns
	nb     int64 // Window/Bucket
	maxT   time.Time
	m      meters
}

// New returns a Counter for cfg (Bucket defaulted), or cfg's validation error.
func New(cfg Config) (*Counter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Counter{
		cfg:    cfg,
		prefix: KeyPrefix + cfg.Name + "/",
		w:      int64(cfg.Window),
		b:      int64(cfg.Bucket),
		span:   int64(cfg.Window + cfg.Lateness),
		late:   int64(cfg.Lateness),
		nb:     int64(cfg.Window / cfg.Bucket),
	}
	// Every stored bucket start + span must fit in int64 nanoseconds.
	c.maxT = time.Unix(0, math.MaxInt64-c.span-c.b)
	return c, nil
}

// Config returns the counter's configuration, Bucket filled in.
func (c *Counter) Config() Config { return c.cfg }

// StateKey returns the state key holding key's buckets.
func (c *Counter) StateKey(key string) []byte {
	k := make([]byte, 0, len(c.prefix)+len(key))
	k = append(k, c.prefix...)
	return append(k, key...)
}

var epoch = time.Unix(0, 0)

// Add counts the record pc is processing under key at event time t and
// returns count(key, pc.Offset()): the number of counted records of key at
// offsets up to and including this one whose bucket lies in the window of
// t (see the package doc). It returns 0, and counts nothing, when the
// record is late (pc.StreamTime() − t > Lateness).
//
// Call it from a stage's Process (or Sequence), at most once per record and
// counter; a repeated call for the same record (a retried Process) returns
// the same count without counting it twice. ctx is the context Process
// received: the metrics of a partition are dropped when it ends (the
// engine ends it when the partition stops).
//
// Errors: a time outside (1970, ~2262 − Window − Lateness) is Permanent
// (the record is dead-lettered); a state read or write failure is returned
// as is (the engine retries it); a corrupt state value, or a key last
// counted at a larger offset than this record (keys counted out of offset
// order: see Counter), is Fatal.
func (c *Counter) Add(ctx context.Context, pc *chain.Context, key string, t time.Time) (int64, error) {
	if !t.After(epoch) || !t.Before(c.maxT) {
		return 0, chain.Permanent(fmt.Errorf("window %q: time %v is outside the range the counter can store (after 1970, before %v)",
			c.cfg.Name, t, c.maxT.UTC()))
	}
	tn := t.UnixNano()
	now := tn
	if s := pc.StreamTime(); !s.IsZero() {
		sn := s.UnixNano()
		if sn-tn > c.late {
			c.m.late.Add(1)
			c.m.tracker(ctx, pc.Topic(), pc.Partition()).evict(pc.EvictionWatermark())
			return 0, nil
		}
		now = max(now, sn)
	}
	st := pc.State()
	skey := c.StateKey(key)
	old, ok, err := st.Get(skey)
	if err != nil {
		return 0, fmt.Errorf("window %q: get %q: %w", c.cfg.Name, skey, err)
	}
	o, qi := pc.Offset(), tn/c.b
	var v value
	if ok {
		if err := v.decode(old); err != nil {
			return 0, chain.Fatal(fmt.Errorf("window %q: state %q: %w", c.cfg.Name, skey, err))
		}
		switch {
		case v.last == o:
			return v.count(qi, c.nb), nil // a repeated call for this record
		case v.last > o:
			return 0, chain.Fatal(fmt.Errorf("window %q: key %q was counted at offset %d, after this record's %d: "+
				"records of one counter key must be counted in offset order (by one stage; under KeyConcurrency > 1 "+
				"the counter key must be a function of the Kafka key)", c.cfg.Name, key, v.last, o))
		}
	}
	prev := entryInfo{exists: ok, last: v.last, size: len(skey) + len(old)}
	if ok {
		prev.exp = c.expiry(v.bs[len(v.bs)-1].idx)
	}
	v.trim(now, c.b, c.span)
	v.add(qi)
	v.last = o
	n := v.count(qi, c.nb)
	enc := v.encode(make([]byte, 0, 1+binary.MaxVarintLen64*(1+2*len(v.bs))))
	exp := c.expiry(v.bs[len(v.bs)-1].idx)
	if err := st.Set(skey, enc, time.Unix(0, exp)); err != nil {
		return 0, fmt.Errorf("window %q: set %q: %w", c.cfg.Name, skey, err)
	}
	c.m.counted.Add(1)
	c.m.tracker(ctx, pc.Topic(), pc.Partition()).update(o, pc.EvictionWatermark(), prev,
		entryInfo{exists: true, exp: exp, size: len(skey) + len(enc)})
	return n, nil
}

// expiry is the last stream time at which bucket idx can still be counted:
// a record that is not late has t ≥ S − Lateness, so its window reaches
// down to q(S − Lateness) − Window, and bucket idx is inside it while
// S < idx·Bucket + Window + Lateness.
func (c *Counter) expiry(idx int64) int64 { return idx*c.b + c.span - 1 }

// Stored state of one key (all integers varints):
//
//	version (1), last offset counted (uvarint), then per bucket in
//	ascending bucket order: bucket index (varint; for every bucket after
//	the first, the uvarint difference to the previous one) and its count
//	(uvarint, ≥ 1).
//
// A bucket index is ⌊t / Bucket⌋ (t in Unix nanoseconds).
const stateVersion = 1

var errCorrupt = errors.New("corrupt window state value")

type bucket struct{ idx, n int64 }

type value struct {
	last int64
	bs   []bucket // ascending idx, n ≥ 1
}

func (v *value) decode(b []byte) error {
	if len(b) < 2 || b[0] != stateVersion {
		return errCorrupt
	}
	b = b[1:]
	last, n := binary.Uvarint(b)
	if n <= 0 || last > math.MaxInt64 {
		return errCorrupt
	}
	b = b[n:]
	v.last = int64(last)
	v.bs = make([]bucket, 0, 8)
	for len(b) > 0 {
		var idx int64
		if len(v.bs) == 0 {
			x, n := binary.Varint(b)
			if n <= 0 {
				return errCorrupt
			}
			idx, b = x, b[n:]
		} else {
			d, n := binary.Uvarint(b)
			prev := v.bs[len(v.bs)-1].idx
			if n <= 0 || d == 0 || d > uint64(math.MaxInt64-prev) {
				return errCorrupt
			}
			idx, b = prev+int64(d), b[n:]
		}
		cnt, n := binary.Uvarint(b)
		if n <= 0 || cnt == 0 || cnt > math.MaxInt64 {
			return errCorrupt
		}
		b = b[n:]
		v.bs = append(v.bs, bucket{idx, int64(cnt)})
	}
	if len(v.bs) == 0 {
		return errCorrupt
	}
	return nil
}

func (v *value) encode(dst []byte) []byte {
	dst = append(dst, stateVersion)
	dst = binary.AppendUvarint(dst, uint64(v.last))
	for i, b := range v.bs {
		if i == 0 {
			dst = binary.AppendVarint(dst, b.idx)
		} else {
			dst = binary.AppendUvarint(dst, uint64(b.idx-v.bs[i-1].idx))
		}
		dst = binary.AppendUvarint(dst, uint64(b.n))
	}
	return dst
}

// trim drops the buckets no record that is not late can count any more at
// stream time now: those with idx·b + span ≤ now.
func (v *value) trim(now, b, span int64) {
	i := 0
	for i < len(v.bs) && v.bs[i].idx*b+span <= now {
		i++
	}
	v.bs = v.bs[i:]
}

// add counts one record in bucket idx.
func (v *value) add(idx int64) {
	i := len(v.bs)
	for i > 0 && v.bs[i-1].idx > idx {
		i--
	}
	if i > 0 && v.bs[i-1].idx == idx {
		v.bs[i-1].n++
		return
	}
	v.bs = append(v.bs, bucket{})
	copy(v.bs[i+1:], v.bs[i:])
	v.bs[i] = bucket{idx, 1}
}

// count sums the buckets in (qi − nb, qi].
func (v *value) count(qi, nb int64) int64 {
	var n int64
	for _, b := range v.bs {
		if b.idx > qi-nb && b.idx <= qi {
			n += b.n
		}
	}
	return n
}
