package reference_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const (
	minute = time.Minute
	hour   = time.Hour
	day    = 24 * time.Hour
)

func ts(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
func tf(d time.Duration) string { return t0.Add(d).Format(attribution.TimeFormat) }

func click(id, user string, at time.Duration, campaign string) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"click","user_id":%q,"time":%q,"campaign_id":%q,"channel":"ch-%s"}`, id, user, ts(at), campaign, id)
}

func install(id, user string, at time.Duration) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"install","user_id":%q,"time":%q}`, id, user, ts(at))
}

func purchase(id, user string, at time.Duration) string {
	return fmt.Sprintf(`{"event_id":%q,"type":"purchase","user_id":%q,"time":%q,"revenue":1.50,"currency":"EUR"}`, id, user, ts(at))
}

// log builds one partition (offsets 0..n-1); the Kafka timestamp is far
// enough after t0 not to trip the clock-skew check.
func log(values ...string) []chain.Record {
	recs := make([]chain.Record, len(values))
	for i, v := range values {
		key := ""
		if j := strings.Index(v, `"user_id":"`); j >= 0 {
			rest := v[j+len(`"user_id":"`):]
			key = rest[:strings.IndexByte(rest, '"')]
		}
		recs[i] = chain.Record{Topic: "events", Partition: 2, Offset: int64(i), Key: []byte(key), Value: []byte(v), Timestamp: t0.Add(60 * day)}
	}
	return recs
}

// attributed / organic / bought render expected outputs.
func attributed(id, user string, at time.Duration, clickID, campaign string, clickAt time.Duration) string {
	return fmt.Sprintf(`{"kind":"install","event_id":%q,"user_id":%q,"time":%q,"attributed":true,"click_id":%q,"campaign_id":%q,"channel":"ch-%s","click_time":%q}`,
		id, user, tf(at), clickID, campaign, clickID, tf(clickAt))
}

func organic(id, user string, at time.Duration) string {
	return fmt.Sprintf(`{"kind":"install","event_id":%q,"user_id":%q,"time":%q,"attributed":false,"click_id":"","campaign_id":"","channel":"","click_time":""}`,
		id, user, tf(at))
}

func bought(id, user string, at time.Duration, installID, campaign string) string {
	return fmt.Sprintf(`{"kind":"purchase","event_id":%q,"user_id":%q,"time":%q,"install_id":%q,"campaign_id":%q,"revenue":1.50,"currency":"EUR"}`,
		id, user, tf(at), installID, campaign)
}

type out struct {
	off   int64
	value string
}

func outs(os []reference.Output) []out {
	var r []out
	for _, o := range os {
		r = append(r, out{o.Offset, string(o.Value)})
	}
	return r
}

func cfgWith(f func(*attribution.Config)) attribution.Config {
	c := attribution.DefaultConfig()
	if f != nil {
		f(&c)
	}
	return c
}

func TestDesignExample(t *testing.T) {
	res := reference.Run([]chain.Record{
		{Offset: 0, Key: []byte("u1"), Timestamp: t0.Add(hour), Value: []byte(`{"event_id":"c1","type":"click","user_id":"u1","time":"2026-11-29T10:00:00Z","campaign_id":"cmp-7","channel":"search"}`)},
		{Offset: 1, Key: []byte("u1"), Timestamp: t0.Add(hour), Value: []byte(`{"event_id":"i1","type":"install","user_id":"u1","time":"2026-11-29T10:05:00Z","app_id":"app-1"}`)},
		{Offset: 2, Key: []byte("u1"), Timestamp: t0.Add(hour), Value: []byte(`{"event_id":"p1","type":"purchase","user_id":"u1","time":"2026-11-29T11:00:00Z","revenue":4.99,"currency":"USD"}`)},
	}, attribution.DefaultConfig())
	require.Len(t, res.Installs, 1)
	require.Len(t, res.Purchases, 1)
	assert.Equal(t, `{"kind":"install","event_id":"i1","user_id":"u1","time":"2026-11-29T10:05:00.000000000Z","attributed":true,"click_id":"c1","campaign_id":"cmp-7","channel":"search","click_time":"2026-11-29T10:00:00.000000000Z"}`, string(res.Installs[0].Value))
	assert.Equal(t, `{"kind":"purchase","event_id":"p1","user_id":"u1","time":"2026-11-29T11:00:00.000000000Z","install_id":"i1","campaign_id":"cmp-7","revenue":4.99,"currency":"USD"}`, string(res.Purchases[0].Value))
	assert.Equal(t, []byte("u1"), res.Installs[0].Key)
	assert.Equal(t, int64(1), res.Installs[0].Offset)
	assert.Equal(t, int64(2), res.Purchases[0].Offset)
	assert.Empty(t, res.Invalid)
	assert.True(t, res.StreamTime.Equal(t0.Add(hour)))
}

func TestInstallRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  attribution.Config
		log  []string
		want []out
	}{
		{"last click wins", cfgWith(nil), []string{
			click("c1", "u1", -2*hour, "A"), click("c2", "u1", -1*hour, "B"), click("c3", "u1", -3*hour, "C"),
			click("x", "u2", -30*minute, "X"), install("i1", "u1", 0)},
			[]out{{4, attributed("i1", "u1", 0, "c2", "B", -hour)}}},
		{"tie goes to the larger offset", cfgWith(nil), []string{
			click("c1", "u1", -hour, "A"), click("c2", "u1", -hour, "B"), click("c0", "u1", -2*hour, "C"), install("i1", "u1", 0)},
			[]out{{3, attributed("i1", "u1", 0, "c2", "B", -hour)}}},
		{"lookback edge is inclusive", cfgWith(nil), []string{
			click("c1", "u1", -7*day, "A"), install("i1", "u1", 0),
			click("c2", "u2", -7*day-1, "B"), install("i2", "u2", 0)},
			[]out{{1, attributed("i1", "u1", 0, "c1", "A", -7*day)}, {3, organic("i2", "u2", 0)}}},
		{"click after the install in time is no candidate", cfgWith(nil), []string{
			click("c1", "u1", time.Nanosecond, "A"), install("i1", "u1", 0)},
			[]out{{1, organic("i1", "u1", 0)}}},
		{"organic install", cfgWith(nil), []string{click("c1", "u2", -hour, "A"), install("i1", "u1", 0)},
			[]out{{1, organic("i1", "u1", 0)}}},
		{"late install: max(S,t) − click.time beyond Lookback+Lateness", cfgWith(nil), []string{
			click("c1", "u1", -6*day, "A"), click("x", "u2", 2*day, "X"), install("i1", "u1", 0)},
			[]out{{2, organic("i1", "u1", 0)}}},
		{"late install within Lookback+Lateness", cfgWith(func(c *attribution.Config) { c.Lateness = 2 * day }), []string{
			click("c1", "u1", -6*day, "A"), click("x", "u2", 2*day, "X"), install("i1", "u1", 0)},
			[]out{{2, attributed("i1", "u1", 0, "c1", "A", -6*day)}}},
		{"click at a larger offset with A ≤ t (Lateness 0) is a candidate", cfgWith(nil), []string{
			click("x", "u2", -hour, "X"), install("i1", "u1", 0), click("c1", "u1", -minute, "A")},
			[]out{{1, attributed("i1", "u1", 0, "c1", "A", -minute)}}},
		{"click at a larger offset after stream time passed t is not", cfgWith(nil), []string{
			install("i1", "u1", 0), click("x", "u2", time.Second, "X"), click("c1", "u1", -minute, "A")},
			[]out{{0, organic("i1", "u1", 0)}}},
		{"lateness admits it via the arrival watermark", cfgWith(func(c *attribution.Config) { c.Lateness = 5 * minute }), []string{
			install("i1", "u1", 0), click("x", "u2", 5*minute, "X"), click("c1", "u1", -minute, "A"),
			click("y", "u2", 5*minute+1, "Y"), click("c2", "u1", -30*time.Second, "B")},
			[]out{{0, attributed("i1", "u1", 0, "c1", "A", -minute)}}},
		{"click at a larger offset with the install's time", cfgWith(func(c *attribution.Config) { c.Lateness = 5 * minute }), []string{
			click("c0", "u1", -hour, "Z"), install("i1", "u1", 0), click("c1", "u1", 0, "A")},
			[]out{{1, attributed("i1", "u1", 0, "c1", "A", 0)}}},
		{"duplicate clicks are ignored", cfgWith(nil), []string{
			click("c1", "u1", -2*hour, "A"), click("c2", "u1", -3*hour, "B"),
			strings.Replace(click("c2", "u1", -hour, "B"), `"ch-c2"`, `"other"`, 1), install("i1", "u1", 0)},
			[]out{{3, attributed("i1", "u1", 0, "c1", "A", -2*hour)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := reference.Run(log(tc.log...), tc.cfg)
			require.Empty(t, res.Invalid)
			assert.Equal(t, tc.want, outs(res.Installs))
		})
	}
}

func TestDuplicates(t *testing.T) {
	cfg := cfgWith(func(c *attribution.Config) { c.DedupHorizon = hour })
	res := reference.Run(log(
		install("i1", "u1", 0),            // 0
		install("i1", "u1", 0),            // 1 dup (S − 0 = 0)
		click("x", "u2", hour, "X"),       // 2 S → 1h
		install("i1", "u9", 0),            // 3 dup: other user, same id, S − t = 1h ≤ 1h
		install("i2", "u1", 50*minute),    // 4
		click("y", "u2", hour+1, "Y"),     // 5 S → 1h+1ns
		install("i1", "u1", 0),            // 6 not a dup: S − 0 > 1h
		install("i2", "u1", 55*minute),    // 7 dup of 4 (S − 50m ≤ 1h)
		click("z", "u2", 111*minute, "Z"), // 8 S → 111m
		install("i2", "u1", 0),            // 9 4 is 61m old; 7 was a dup: not a dup
		purchase("p1", "u1", 2*hour),      // 10
		purchase("p1", "u1", 2*hour),      // 11 dup
		click("x", "u2", hour, "X"),       // 12 dup click (S 2h − 1h ≤ 1h)
		click("x", "u2", 10*minute, "X"),  // 13 dup: earlier non-dup 2 has S − 1h = 1h ≤ 1h
	), cfg)
	assert.Equal(t, []int64{1, 3, 7, 11, 12, 13}, res.Duplicates)
	var offs []int64
	for _, o := range res.Installs {
		offs = append(offs, o.Offset)
	}
	assert.Equal(t, []int64{0, 4, 6, 9}, offs)
	require.Len(t, res.Purchases, 1)
	assert.Equal(t, bought("p1", "u1", 2*hour, "i2", ""), string(res.Purchases[0].Value))
}

func TestPurchaseRules(t *testing.T) {
	cfg := attribution.DefaultConfig()
	res := reference.Run(log(
		purchase("p0", "u1", -hour),     // 0 no install yet
		click("c1", "u1", -minute, "A"), // 1
		install("i1", "u1", 0),          // 2 attributed to c1
		purchase("p1", "u1", hour),      // 3 → i1/A
		install("i2", "u1", 2*hour),     // 4 reinstall, also attributed to c1
		purchase("p2", "u1", 3*hour),    // 5 → i2 (largest offset)
		install("i3", "u3", 0),          // 6 organic
		purchase("p3", "u3", 30*day),    // 7 → i3, exactly at retention
		purchase("p4", "u3", 30*day+1),  // 8 beyond retention: none
		purchase("p5", "u4", 0),         // 9 install of u4 comes later in the log
		install("i4", "u4", -hour),      // 10
	), cfg)
	require.Empty(t, res.Invalid)
	assert.Equal(t, []out{
		{0, bought("p0", "u1", -hour, "", "")},
		{3, bought("p1", "u1", hour, "i1", "A")},
		{5, bought("p2", "u1", 3*hour, "i2", "A")},
		{7, bought("p3", "u3", 30*day, "i3", "")},
		{8, bought("p4", "u3", 30*day+1, "", "")},
		{9, bought("p5", "u4", 0, "", "")},
	}, outs(res.Purchases))
}

func TestRetentionUsesStreamTime(t *testing.T) {
	// A late purchase: t is within retention but S(o) is not.
	res := reference.Run(log(
		install("i1", "u1", 0), click("x", "u2", 31*day, "X"), purchase("p1", "u1", day),
	), attribution.DefaultConfig())
	assert.Equal(t, bought("p1", "u1", day, "", ""), string(res.Purchases[0].Value))
}

func TestInvalidRecordsAndStreamTime(t *testing.T) {
	recs := log(
		click("c1", "u1", -hour, "A"),
		`{"event_id":"bad","type":"click","user_id":"u2","time":"2026-12-30T10:00:00Z","campaign_id":"X"}`, // valid: timestamp is t0+60d
		install("i1", "u1", 0),
		`not json`,
	)
	recs[1].Timestamp = t0 // now 31 days in the future: invalid, must not move S
	res := reference.Run(recs, attribution.DefaultConfig())
	require.Len(t, res.Invalid, 2)
	assert.Equal(t, int64(1), res.Invalid[0].Offset)
	assert.Contains(t, res.Invalid[0].Reason, "too far after the record timestamp")
	assert.Equal(t, int64(3), res.Invalid[1].Offset)
	assert.Equal(t, attributed("i1", "u1", 0, "c1", "A", -hour), string(res.Installs[0].Value))
	assert.True(t, res.StreamTime.Equal(t0))
}

func TestFinalState(t *testing.T) {
	cfg := attribution.DefaultConfig()
	res := reference.Run(log(
		click("old", "u1", -20*day, "A"), // unusable at the end
		click("c1", "u1", -hour, "B"),
		install("i0", "u2", -40*day), // beyond retention at the end
		install("i1", "u1", 0),
		install("i1", "u1", 0), // dup
		purchase("p1", "u1", hour),
	), cfg)
	assert.True(t, res.StreamTime.Equal(t0.Add(hour)))
	want := attribution.Snapshot{
		Clicks:   []attribution.StoredClick{{UserID: "u1", EventID: "c1", Offset: 1, Time: t0.Add(-hour), Arrival: t0.Add(-hour), CampaignID: "B", Channel: "ch-c1"}},
		Installs: []attribution.StoredInstall{{UserID: "u1", EventID: "i1", Offset: 3, Time: t0, CampaignID: "B"}},
		Seen: []attribution.SeenEvent{
			{Type: "click", EventID: "c1", Time: t0.Add(-hour)},
			{Type: "install", EventID: "i1", Time: t0},
			{Type: "purchase", EventID: "p1", Time: t0.Add(hour)},
		},
	}
	assert.Equal(t, want.String(), res.Final.String())

	// Usable is the filter the engine's store is compared with.
	all := res.Final
	all.Clicks = append(all.Clicks, attribution.StoredClick{UserID: "u9", Time: t0.Add(-8 * day)})
	assert.Equal(t, want.String(), reference.Usable(all, res.StreamTime, cfg).String())
}
