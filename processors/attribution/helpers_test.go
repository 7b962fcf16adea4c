package attribution_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/RaduBerinde/btreemap"

	"github.com/differential-dev/differential/chain"
)

// memState is a map-based chain.StageState (with a B-tree of its keys for
// the range reads); write tags (offsets) are ignored.
type memState struct {
	m    map[string]memEntry
	keys *btreemap.BTreeMap[string, struct{}]
}

type memEntry struct {
	v   []byte
	exp time.Time
}

func newMemState() *memState {
	return &memState{m: map[string]memEntry{}, keys: btreemap.New[string, struct{}](16, strings.Compare)}
}

func (s *memState) Get(key []byte) ([]byte, bool, error) {
	e, ok := s.m[string(key)]
	return e.v, ok, nil
}

func (s *memState) Set(_ int64, key, value []byte, expires time.Time) error {
	s.m[string(key)] = memEntry{v: value, exp: expires}
	s.keys.ReplaceOrInsert(string(key), struct{}{})
	return nil
}

func (s *memState) Delete(_ int64, key []byte) error {
	s.delete(string(key))
	return nil
}

func (s *memState) delete(key string) {
	delete(s.m, key)
	s.keys.Delete(key)
}

func (s *memState) Scan(lo, hi []byte, fn func(key, value []byte) bool) error {
	upper := btreemap.Max[string]()
	if hi != nil {
		upper = btreemap.LT(string(hi))
	}
	for k := range s.keys.Ascend(btreemap.GE(string(lo)), upper) {
		if !fn([]byte(k), s.m[k].v) {
			break
		}
	}
	return nil
}

func (s *memState) ScanReverse(lo, hi []byte, fn func(key, value []byte) bool) error {
	upper := btreemap.Max[string]()
	if hi != nil {
		upper = btreemap.LT(string(hi))
	}
	for k := range s.keys.Descend(upper, btreemap.GE(string(lo))) {
		if !fn([]byte(k), s.m[k].v) {
			break
		}
	}
	return nil
}

// evict deletes what the engine deletes at a checkpoint whose slowest
// watermark is wm: entries with a non-zero expiry <= wm − 1ns.
func (s *memState) evict(wm time.Time) {
	if wm.IsZero() {
		return
	}
	before := wm.Add(-1)
	for k, e := range s.m {
		if !e.exp.IsZero() && !e.exp.After(before) {
			s.delete(k)
		}
	}
}

func (s *memState) entries() map[string][]byte {
	out := make(map[string][]byte, len(s.m))
	for k, e := range s.m {
		out[k] = e.v
	}
	return out
}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// ts formats t0+d as RFC 3339.
func ts(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }

func click(id, user string, at time.Duration, campaign string) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"click","user_id":%q,"time":%q,"campaign_id":%q,"channel":"ch-%s"}`, id, user, ts(at), campaign, id)
}

func install(id, user string, at time.Duration) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"install","user_id":%q,"time":%q,"app_id":"app-1"}`, id, user, ts(at))
}

func purchase(id, user string, at time.Duration, revenue string) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"purchase","user_id":%q,"time":%q,"revenue":%s,"currency":"USD"}`, id, user, ts(at), revenue)
}

// recordsOf makes one partition's log from JSON values (offsets 0..n-1,
// key = the value's user_id, Kafka timestamp = event time + 1s or t0).
func recordsOf(values ...string) []chain.Record {
	recs := make([]chain.Record, len(values))
	for i, v := range values {
		key := ""
		if j := strings.Index(v, `"user_id":"`); j >= 0 {
			rest := v[j+len(`"user_id":"`):]
			key = rest[:strings.IndexByte(rest, '"')]
		}
		stamp := t0
		if j := strings.Index(v, `"time":"`); j >= 0 {
			rest := v[j+len(`"time":"`):]
			if tt, err := time.Parse(time.RFC3339Nano, rest[:strings.IndexByte(rest, '"')]); err == nil {
				stamp = tt.Add(time.Second)
			}
		}
		recs[i] = chain.Record{Topic: "events", Partition: 3, Offset: int64(i), Key: []byte(key), Value: []byte(v), Timestamp: stamp}
	}
	return recs
}

// GetAsOf is Get: the fake holds one stage's writes, and a horizon hides
// only earlier stages' writes.
func (s *memState) GetAsOf(_ int64, key []byte) ([]byte, bool, error) { return s.Get(key) }

// ScanAsOf is Scan or ScanReverse, as GetAsOf is Get.
func (s *memState) ScanAsOf(_ int64, lo, hi []byte, reverse bool, fn func(key, value []byte) bool) error {
	if reverse {
		return s.ScanReverse(lo, hi, fn)
	}
	return s.Scan(lo, hi, fn)
}
