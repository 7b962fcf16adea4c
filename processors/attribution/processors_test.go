package attribution_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// harness drives the three processors by hand.
type harness struct {
	t      *testing.T
	cfg    attribution.Config
	dec    chain.Decoder
	stages []chain.Stage
	st     *memState
}

func newHarness(t *testing.T, cfg attribution.Config) *harness {
	return &harness{t: t, cfg: cfg, dec: attribution.Decoder(cfg), stages: attribution.Chain(cfg), st: newMemState()}
}

func (h *harness) event(off int64, value string) *chain.Event {
	r := recordsOf(value)[0]
	r.Offset = off
	d, err := h.dec.Decode(&r)
	require.NoError(h.t, err)
	return &chain.Event{Record: r, Decoded: d}
}

func (h *harness) stage(typ string) chain.Stage {
	for _, s := range h.stages {
		if s.Name == typ {
			return s
		}
	}
	h.t.Fatalf("no stage %s", typ)
	return chain.Stage{}
}

// noEvict as run's evict argument means a zero EvictionWatermark.
const noEvict = time.Duration(math.MinInt64)

// run sequences and processes ev in its stage with StreamTime t0+stream and
// EvictionWatermark t0+evict; it returns skip and outputs.
func (h *harness) run(ev *chain.Event, stream, evict time.Duration) (bool, []chain.Message) {
	s := h.stage(ev.Type)
	require.True(h.t, s.Filter(ev))
	wm := t0.Add(evict)
	if evict == noEvict {
		wm = time.Time{}
	}
	pc := chain.NewContext(chain.ContextOptions{Topic: "events", Partition: ev.Partition, Stage: s.Name, Offset: ev.Offset,
		StreamTime: t0.Add(stream), EvictionWatermark: wm, State: h.st})
	skip, err := s.Processor.(chain.Sequencer).Sequence(pc, ev)
	require.NoError(h.t, err)
	if skip {
		return true, nil
	}
	require.NoError(h.t, s.Processor.Process(context.Background(), pc, ev))
	return false, pc.Emitted()
}

func (h *harness) snapshot() attribution.Snapshot {
	s, err := attribution.SnapshotOf(h.st.entries())
	require.NoError(h.t, err)
	return s
}

func TestChainStages(t *testing.T) {
	h := newHarness(t, attribution.DefaultConfig())
	require.Len(t, h.stages, 3)
	names := []string{h.stages[0].Name, h.stages[1].Name, h.stages[2].Name}
	assert.Equal(t, []string{"click", "install", "purchase"}, names)
	ev := h.event(0, click("c1", "u1", 0, "A"))
	assert.True(t, h.stages[0].Filter(ev))
	assert.False(t, h.stages[1].Filter(ev))
	assert.False(t, h.stages[2].Filter(ev))
	for _, s := range h.stages {
		_, ok := s.Processor.(chain.Sequencer)
		assert.True(t, ok, s.Name)
	}
	assert.PanicsWithValue(t, "attribution.Chain: invalid config: attribution: Lookback must be > 0 (got 0s)", func() {
		cfg := attribution.DefaultConfig()
		cfg.Lookback = 0
		attribution.Chain(cfg)
	})
}

// userKey is prefix + the length-prefixed user + the big-endian numbers
// (doc.go "State layout").
func userKey(prefix, user string, nums ...int64) string {
	k := binary.AppendUvarint([]byte(prefix), uint64(len(user)))
	k = append(k, user...)
	for _, n := range nums {
		k = binary.BigEndian.AppendUint64(k, uint64(n))
	}
	return string(k)
}

func clickKeyOf(user string, t time.Time, off int64) string {
	return userKey(attribution.ClickKeyPrefix, user, t.UnixNano(), off)
}

func installKeyOf(user string, off int64) string {
	return userKey(attribution.InstallKeyPrefix, user, off)
}

func TestClickStoreAndExpiry(t *testing.T) {
	cfg := attribution.DefaultConfig()
	cfg.Lateness = time.Hour
	h := newHarness(t, cfg)
	skip, out := h.run(h.event(0, click("c1", "u1", -8*24*time.Hour, "A")), 0, noEvict)
	assert.False(t, skip)
	assert.Empty(t, out, "clicks produce no output")
	h.run(h.event(1, click("c2", "u1", -time.Hour, "B")), time.Minute, noEvict)
	s := h.snapshot()
	require.Len(t, s.Clicks, 2)
	assert.Equal(t, attribution.StoredClick{UserID: "u1", EventID: "c2", Offset: 1, Time: t0.Add(-time.Hour), Arrival: t0.Add(time.Minute),
		CampaignID: "B", Channel: "ch-c2"}, s.Clicks[1])
	// One key per click; it expires when the click is no longer usable:
	// time + Lookback + Lateness.
	k := clickKeyOf("u1", t0.Add(-time.Hour), 1)
	require.Contains(t, h.st.m, k)
	assert.True(t, h.st.m[k].exp.Equal(t0.Add(-time.Hour+7*24*time.Hour+time.Hour)), "expiry = time + Lookback + Lateness")
	require.Contains(t, h.st.m, clickKeyOf("u1", t0.Add(-8*24*time.Hour), 0))

	// A click that is already unusable is not stored.
	h2 := newHarness(t, cfg)
	h2.run(h2.event(0, click("c1", "u1", -30*24*time.Hour, "A")), 0, 0)
	assert.NotContains(t, h2.st.m, clickKeyOf("u1", t0.Add(-30*24*time.Hour), 0))
	assert.Contains(t, h2.st.m, "d/click/c1")
}

// TestUsersDoNotShareKeyRanges: a user id that extends another one cannot
// enter the other's scans. Here the other id is "u1" followed by the bytes
// of a click time inside u1's lookback: were user ids not length-prefixed,
// its clicks and installs would sort inside u1's ranges.
func TestUsersDoNotShareKeyRanges(t *testing.T) {
	h := newHarness(t, attribution.DefaultConfig())
	other := "u1" + string(binary.BigEndian.AppendUint64(nil, uint64(t0.Add(-30*time.Second).UnixNano())))
	as := func(ev *chain.Event, user string) *chain.Event {
		ev.Payload.(*attribution.Event).UserID = user
		return ev
	}
	h.run(as(h.event(0, click("c-other", "x", -time.Minute, "X")), other), 0, 0)
	h.run(as(h.event(1, install("i-other", "x", 0)), other), 0, 0)
	_, out := h.run(h.event(2, install("i1", "u1", 0)), 0, 0)
	assert.Contains(t, string(out[0].Value), `"attributed":false`)
	_, out = h.run(h.event(3, purchase("p1", "u1", time.Minute, "1")), time.Minute, 0)
	assert.Contains(t, string(out[0].Value), `"install_id":"i1"`)
	_, out = h.run(as(h.event(4, purchase("p2", "x", time.Minute, "1")), other), time.Minute, 0)
	assert.Contains(t, string(out[0].Value), `"install_id":"i-other","campaign_id":"X"`)
	s := h.snapshot()
	require.Len(t, s.Installs, 2)
	assert.Equal(t, other, s.Installs[1].UserID)
}

func TestSequenceDedup(t *testing.T) {
	cfg := attribution.DefaultConfig()
	cfg.DedupHorizon = time.Hour
	h := newHarness(t, cfg)
	skip, out := h.run(h.event(0, install("i1", "u1", 0)), 0, 0)
	require.False(t, skip)
	require.Len(t, out, 1)
	e := h.st.m["d/install/i1"]
	assert.True(t, e.exp.Equal(t0.Add(time.Hour)), "expiry = time + DedupHorizon")

	skip, _ = h.run(h.event(1, install("i1", "u2", 0)), time.Hour, 0) // S − t = horizon: duplicate
	assert.True(t, skip)
	skip, _ = h.run(h.event(2, click("i1", "u2", 0, "A")), time.Hour, 0) // other type: not a duplicate
	assert.False(t, skip)
	skip, _ = h.run(h.event(3, install("i1", "u1", -time.Hour)), time.Hour+1, 0) // beyond the horizon
	assert.False(t, skip)
	assert.True(t, h.st.m["d/install/i1"].exp.Equal(t0.Add(time.Hour)), "keeps the latest time")
	skip, _ = h.run(h.event(4, install("i1", "u1", -time.Minute)), time.Hour+1, 0)
	assert.False(t, skip, "a stale entry stays stale")
}

func TestInstallCandidateRule(t *testing.T) {
	cfg := attribution.DefaultConfig()
	cfg.Lateness = 5 * time.Minute
	h := newHarness(t, cfg)
	// The click stage ran ahead: clicks at offsets 5 and 6 are stored before
	// the install at offset 2 is processed.
	h.run(h.event(0, click("c0", "u1", -time.Hour, "A")), 0, 0)
	h.run(h.event(5, click("c5", "u1", -time.Minute, "B")), 5*time.Minute, 0)      // A = 5m ≤ t+L
	h.run(h.event(6, click("c6", "u1", -30*time.Second, "C")), 5*time.Minute+1, 0) // A > t+L
	h.run(h.event(7, click("c7", "u1", time.Second, "D")), 5*time.Minute+1, 0)     // after t
	_, out := h.run(h.event(2, install("i1", "u1", 0)), 0, 0)
	require.Len(t, out, 1)
	assert.Equal(t, `{"kind":"install","event_id":"i1","user_id":"u1","time":"2026-11-29T10:00:00.000000000Z","attributed":true,"click_id":"c5","campaign_id":"B","channel":"ch-c5","click_time":"2026-11-29T09:59:00.000000000Z"}`,
		string(out[0].Value))
	assert.Equal(t, []byte("u1"), out[0].Key)
	assert.Equal(t, "", out[0].Topic)
	assert.Equal(t, []chain.Header{{Key: []byte("differential-source"), Value: []byte("3/2")}}, out[0].Headers)
	s := h.snapshot()
	require.Len(t, s.Installs, 1)
	assert.Equal(t, attribution.StoredInstall{UserID: "u1", EventID: "i1", Offset: 2, Time: t0, CampaignID: "B"}, s.Installs[0])
	assert.True(t, h.st.m[installKeyOf("u1", 2)].exp.Equal(t0.Add(30*24*time.Hour)), "expiry = time + InstallRetention")
}

func TestPurchaseUsesEarlierInstallsOnly(t *testing.T) {
	h := newHarness(t, attribution.DefaultConfig())
	h.run(h.event(0, click("c0", "u1", -time.Hour, "A")), 0, 0)
	h.run(h.event(1, install("i1", "u1", 0)), 0, 0)
	h.run(h.event(5, install("i5", "u1", time.Hour)), time.Hour, 0) // install stage ahead
	_, out := h.run(h.event(3, purchase("p3", "u1", 30*time.Minute, "4.990")), 30*time.Minute, 0)
	require.Len(t, out, 1)
	assert.Equal(t, `{"kind":"purchase","event_id":"p3","user_id":"u1","time":"2026-11-29T10:30:00.000000000Z","install_id":"i1","campaign_id":"A","revenue":4.990,"currency":"USD"}`,
		string(out[0].Value))
	_, out = h.run(h.event(6, purchase("p6", "u1", 2*time.Hour, "1")), 2*time.Hour, 0)
	assert.Contains(t, string(out[0].Value), `"install_id":"i5","campaign_id":"A"`)
	_, out = h.run(h.event(7, purchase("p7", "u2", 2*time.Hour, "1")), 2*time.Hour, 0)
	assert.Contains(t, string(out[0].Value), `"install_id":"","campaign_id":""`)
}

func TestProcessorErrors(t *testing.T) {
	h := newHarness(t, attribution.DefaultConfig())
	ev := h.event(0, install("i1", "u1", 0))
	s := h.stage("install")

	// No store: a plain error from Process, Fatal from Sequence.
	pc := chain.NewContext(chain.ContextOptions{Offset: 0})
	err := s.Processor.Process(context.Background(), pc, ev)
	require.ErrorIs(t, err, chain.ErrNoStore)
	assert.False(t, chain.IsFatal(err))
	_, err = s.Processor.(chain.Sequencer).Sequence(pc, ev)
	require.ErrorIs(t, err, chain.ErrNoStore)
	assert.True(t, chain.IsFatal(err))

	// Wrong payload: Fatal.
	bad := *ev
	bad.Payload = "x"
	pc = chain.NewContext(chain.ContextOptions{State: h.st})
	err = s.Processor.Process(context.Background(), pc, &bad)
	assert.True(t, chain.IsFatal(err), "%v", err)

	// Corrupt state: Fatal.
	require.NoError(t, h.st.Set(0, []byte(clickKeyOf("u1", ev.Time, 0)), []byte{2, 0xff}, time.Time{}))
	err = s.Processor.Process(context.Background(), pc, ev)
	assert.True(t, chain.IsFatal(err), "%v", err)
	require.NoError(t, h.st.Set(0, []byte("d/install/i1"), []byte{9}, time.Time{}))
	_, err = s.Processor.(chain.Sequencer).Sequence(pc, ev)
	assert.True(t, chain.IsFatal(err), "%v", err)
	_, err = attribution.SnapshotOf(h.st.entries())
	assert.Error(t, err)
	_, err = attribution.SnapshotOf(map[string][]byte{"zz": nil})
	assert.Error(t, err)
}

func TestProcessIsRepeatable(t *testing.T) {
	// A retried Process (same offset) does not store the record twice.
	h := newHarness(t, attribution.DefaultConfig())
	ev := h.event(4, click("c1", "u1", 0, "A"))
	s := h.stage("click")
	for i := 0; i < 2; i++ {
		pc := chain.NewContext(chain.ContextOptions{Offset: 4, StreamTime: t0, State: h.st})
		require.NoError(t, s.Processor.Process(context.Background(), pc, ev))
	}
	assert.Len(t, h.snapshot().Clicks, 1)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, attribution.DefaultConfig().Validate())
	c := attribution.Config{Lateness: -1, MaxClockSkew: -1, InstallRetention: 200 * 365 * 24 * time.Hour}
	err := c.Validate()
	require.Error(t, err)
	for _, s := range []string{"Lookback must be > 0", "Lateness must be >= 0", "InstallRetention must be at most",
		"DedupHorizon must be > 0", "MaxClockSkew must be >= 0", "MaxRecordBytes must be > 0"} {
		assert.Contains(t, err.Error(), s)
	}
	d := attribution.DefaultConfig()
	assert.Equal(t, d.Lookback, d.DedupHorizon)
	assert.Equal(t, 7*24*time.Hour, d.Lookback)
	assert.Equal(t, 30*24*time.Hour, d.InstallRetention)
	assert.Equal(t, time.Hour, d.MaxClockSkew)
	assert.Equal(t, 64<<10, d.MaxRecordBytes)
	assert.Zero(t, d.Lateness)
}

func TestAppendString(t *testing.T) {
	assert.Equal(t, `"a\"b\\c\n\t\r\u0001é\ufffd"`, string(attribution.AppendString(nil, "a\"b\\c\n\t\r\x01é\xff")))
	assert.Equal(t, `"2026-11-29T10:00:00.000000000Z"`, string(attribution.AppendTime(nil, t0.In(time.FixedZone("x", 3600)))))
	assert.Equal(t, "12/345", string(attribution.SourceValue(12, 345)))
}
