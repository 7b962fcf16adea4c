package attribution

import (
	"bytes"
	"sort"
	"testing"
	"time"

	"github.com/differential-dev/differential/commit"
)

// mapReader is a StateReader over a map.
type mapReader struct {
	kv  map[string][]byte
	cps map[string]commit.Checkpoint
}

func (m mapReader) Get(k []byte) ([]byte, bool, error) { v, ok := m.kv[string(k)]; return v, ok, nil }
func (m mapReader) Checkpoint(s string) (commit.Checkpoint, bool, error) {
	cp, ok := m.cps[s]
	return cp, ok, nil
}
func (m mapReader) Scan(lo, hi []byte, fn func(k, v []byte) bool) error {
	var keys []string
	for k := range m.kv {
		if bytes.Compare([]byte(k), lo) >= 0 && (hi == nil || bytes.Compare([]byte(k), hi) < 0) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k), m.kv[k]) {
			break
		}
	}
	return nil
}

func TestQueryUser(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Lookback, cfg.Lateness, cfg.InstallRetention = time.Hour, 0, 2*time.Hour
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := mapReader{kv: map[string][]byte{}, cps: map[string]commit.Checkpoint{
		StageClick:   {Next: 10, Watermark: base.UnixNano()},
		StageInstall: {Next: 8, Watermark: base.UnixNano()},
	}}
	click := func(user string, at time.Duration, off int64, id string) {
		e := &Event{EventID: id, UserID: user, Time: base.Add(at), CampaignID: "c-" + id, Channel: "web"}
		m.kv[string(appendClickKey(nil, user, e.Time.UnixNano(), off))] = encodeClick(e.Time, e)
	}
	install := func(user string, at time.Duration, off int64, id string) {
		tt := base.Add(at)
		m.kv[string(appendInstallKey(nil, user, off))] = encodeInstall(tt, tt, id, "camp")
	}
	click("u1", -2*time.Hour, 1, "old") // out of the look-back window
	click("u1", -30*time.Minute, 2, "k1")
	click("u1", -10*time.Minute, 5, "k2")
	click("u10", -time.Minute, 6, "other") // another user, whose id starts like u1's
	click("u", -time.Minute, 7, "short")
	install("u1", -3*time.Hour, 3, "gone")
	install("u1", -time.Hour, 4, "i1")
	install("u10", -time.Minute, 7, "other")

	s, err := QueryUser(m, cfg, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Clicks) != 2 || s.Clicks[0].EventID != "k1" || s.Clicks[1].EventID != "k2" || s.Clicks[1].Offset != 5 {
		t.Fatalf("clicks = %+v, want k1 and k2", s.Clicks)
	}
	if len(s.Installs) != 1 || s.Installs[0].EventID != "i1" || s.Installs[0].Offset != 4 {
		t.Fatalf("installs = %+v, want i1", s.Installs)
	}
	if s.Velocity != nil {
		t.Fatalf("velocity %+v without the velocity stage", s.Velocity)
	}
	if s.Offset() != 8 || s.Stages[StageClick].Offset != 10 || !s.Stages[StageInstall].Watermark.Equal(base) {
		t.Fatalf("positions %+v (offset %d), want click 10, install 8", s.Stages, s.Offset())
	}
	if s, err := QueryUser(m, cfg, "nobody"); err != nil || len(s.Clicks)+len(s.Installs) != 0 {
		t.Fatalf("nobody: %+v %v", s, err)
	}
}
