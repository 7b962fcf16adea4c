// Package reference is a plain, independent implementation of DESIGN.md "Attribution rules"
// attribution semantics over the records of one partition, for testing the
// attribution processors and the engine against.
//
// It shares no rule code with package attribution: it validates records
// with its own code (encoding/json into a map), computes stream times,
// duplicates and matches with direct loops over each user's records (an
// install's over the clicks in its lookback range), and never
// evicts. It uses attribution only for the Config, the output formatting
// (AppendInstall, AppendPurchase), the source header (ParseSource) and the
// Snapshot types.
//
// # Idle releases
//
// With Config.IdleTimeout > 0 the model applies the engine's release rule
// over the log (chain.Context.Horizon): an install at offset o sees only
// the clicks at offsets below H(o) = 1 + the offset of the first record at
// or after o whose next record's Kafka timestamp is more than IdleTimeout
// after its own. The records' timestamps must be the ones the engine read
// (read them back from the topic when the broker assigns them:
// LogAppendTime). With 0 the model assumes no such gap.
//
// # Final logical state
//
// Result.Final is the window state that is still usable at the partition's
// final stream time S_end (the largest valid event time of the log):
//   - every non-duplicate click c with S_end − c.time ≤ Lookback+Lateness
//     (with its arrival watermark A = max(S(c.offset), c.time));
//   - every non-duplicate install i with S_end − i.time ≤ InstallRetention
//     (with the campaign it was attributed to, "" if organic);
//   - every (type, event_id) of a non-duplicate record whose latest
//     non-duplicate time T has S_end − T ≤ DedupHorizon.
//
// An entry outside this set can influence no later record (every later
// record has S ≥ S_end), so an implementation that evicts may hold a
// superset; Usable applies the same filter to any Snapshot, e.g. the
// engine's store decoded with attribution.SnapshotOf.
//
// # Checking what an engine wrote
//
// Check (or Expect, then Expectation.Check for several runs over one
// input) is the one comparison of an engine's output and dead-letter topics
// with the model, for the CLI demo, the benchmark and every test that runs
// the attribution chain. It attributes each written record to its input
// record (attribution.ParseSource on the SourceHeader; chain's
// HeaderDLQPartition and HeaderDLQOffset on a dead letter) and returns a
// Report: per kind (installs, purchases, dead letters) matched, mismatched,
// missing and unexpected input records, repeated copies split into
// byte-identical and conflicting ones, unattributable records and order
// violations, with the first problems described and a Summary. Options
// say what a run may write: Duplicates (NoDuplicates for exactly-once or a
// run without crashes; IdenticalDuplicates for at-least-once after crashes
// or partition moves) and Order (KeyOrder for key-parallel stages,
// StageOrder for strict partition order). Records read back through sarama
// convert with FromKafka, a chaintest's outputs with FromMessages. Nothing
// here needs a testing.TB; a Report's Err turns it into an error.
//
// Expect, Check and Run are pure functions of their arguments and safe for
// concurrent use; an Expectation is read-only once built.
package reference

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// Output is one output record of a stage.
type Output struct {
	Partition int32
	Offset    int64 // the input record's offset
	Key       []byte
	Value     []byte
}

// Invalid is a dead-lettered record.
type Invalid struct {
	Offset int64
	Reason string
}

// Result is what DESIGN.md "Attribution rules" prescribes for one partition's log.
type Result struct {
	// Installs and Purchases are the stages' outputs in offset order.
	Installs  []Output
	Purchases []Output
	// Alerts are the velocity stage's alerts in offset order (none unless
	// Config.Velocity is enabled).
	Alerts []Output
	// Invalid are the records that fail validation, in offset order.
	Invalid []Invalid
	// Duplicates are the offsets of valid records that are duplicates.
	Duplicates []int64
	// StreamTime is the final stream time S_end (zero if no valid record).
	StreamTime time.Time
	// Final is the logical state usable at StreamTime (see the package doc).
	Final attribution.Snapshot
}

var currencyRE = regexp.MustCompile(`^[A-Za-z]{3}$`)

// Parse validates one record the way DESIGN.md "Attribution rules" (as specified by
// attribution.Decoder's documentation) says, independently of the
// attribution package's decoder.
func Parse(r *chain.Record, cfg attribution.Config) (attribution.Event, error) {
	var e attribution.Event
	if len(r.Value) > cfg.MaxRecordBytes {
		return e, fmt.Errorf("value too large: %d > %d bytes", len(r.Value), cfg.MaxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(r.Value))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return e, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return e, errors.New("not a JSON object: trailing data")
	}
	str := func(name string) (string, error) {
		v := m[name]
		if v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s has JSON type %T, want string", name, v)
		}
		return s, nil
	}
	var err error
	fields := []struct {
		name string
		dst  *string
	}{
		{"event_id", &e.EventID}, {"type", &e.Type}, {"user_id", &e.UserID}, {"campaign_id", &e.CampaignID},
		{"channel", &e.Channel}, {"currency", &e.Currency},
	}
	for _, f := range fields {
		if *f.dst, err = str(f.name); err != nil {
			return e, err
		}
	}
	ts, err := str("time")
	if err != nil {
		return e, err
	}
	var revenue json.Number
	hasRevenue := false
	if v := m["revenue"]; v != nil {
		n, ok := v.(json.Number)
		if !ok {
			return e, fmt.Errorf("revenue has JSON type %T, want number", v)
		}
		revenue, hasRevenue = n, true
	}
	if e.EventID == "" || e.UserID == "" {
		return e, errors.New("event_id and user_id must be non-empty")
	}
	if e.Type != attribution.TypeClick && e.Type != attribution.TypeInstall && e.Type != attribution.TypePurchase {
		return e, fmt.Errorf("unknown type %q", e.Type)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return e, fmt.Errorf("bad time %q", ts)
	}
	e.Time = t.UTC()
	if e.Time.Compare(attribution.MinTime) <= 0 || e.Time.Compare(attribution.MaxTime) >= 0 {
		return e, fmt.Errorf("time %q out of range", ts)
	}
	if !r.Timestamp.IsZero() && e.Time.After(r.Timestamp.Add(cfg.MaxClockSkew)) {
		return e, fmt.Errorf("time %q too far after the record timestamp %v", ts, r.Timestamp)
	}
	switch e.Type {
	case attribution.TypeClick:
		if e.CampaignID == "" {
			return e, errors.New("click without campaign_id")
		}
	case attribution.TypePurchase:
		if !hasRevenue {
			return e, errors.New("purchase without revenue")
		}
		f, err := revenue.Float64()
		if err != nil || f < 0 {
			return e, fmt.Errorf("bad revenue %s", revenue)
		}
		e.Revenue, e.RevenueText = f, revenue.String()
		if !currencyRE.MatchString(e.Currency) {
			return e, fmt.Errorf("bad currency %q", e.Currency)
		}
	}
	if hasRevenue {
		e.RevenueText = revenue.String()
	}
	if !bytes.Equal(r.Key, []byte(e.UserID)) {
		return e, fmt.Errorf("key %q is not user_id %q", r.Key, e.UserID)
	}
	return e, nil
}

type rec struct {
	off   int64
	valid bool
	dup   bool
	ev    attribution.Event
	s     time.Time // S(off)
	// h is the horizon H(off): 1 + the offset of the first record at or
	// after off whose next record's Kafka timestamp is more than
	// IdleTimeout after its own (math.MaxInt64: none, or no IdleTimeout).
	h int64
	// install results
	attributed bool
	campaign   string
}

// Run applies DESIGN.md "Attribution rules" to the records of one partition (any order; they
// are sorted by offset) and returns the outputs, the dead letters and the
// final usable state.
func Run(records []chain.Record, cfg attribution.Config) Result {
	if err := cfg.Validate(); err != nil {
		panic("reference.Run: " + err.Error())
	}
	sorted := make([]*chain.Record, len(records))
	for i := range records {
		sorted[i] = &records[i]
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Offset < sorted[j].Offset })

	var res Result
	rs := make([]*rec, len(sorted))
	var stream time.Time // S before the current record; zero when no valid record yet
	for i, r := range sorted {
		x := &rec{off: r.Offset, s: stream}
		ev, err := Parse(r, cfg)
		if err != nil {
			res.Invalid = append(res.Invalid, Invalid{Offset: r.Offset, Reason: err.Error()})
		} else {
			x.valid, x.ev = true, ev
			if ev.Time.After(stream) {
				stream = ev.Time
			}
		}
		rs[i] = x
	}
	res.StreamTime = stream

	// Horizons, from the last record back: where the log shows the leader
	// idle (chain.Context.Horizon). The end of the log needs none: no
	// record lies beyond it.
	h := int64(math.MaxInt64)
	for i := len(rs) - 1; i >= 0; i-- {
		if cfg.IdleTimeout > 0 && i+1 < len(rs) && sorted[i+1].Timestamp.Sub(sorted[i].Timestamp) > cfg.IdleTimeout {
			h = sorted[i].Offset + 1
		}
		rs[i].h = h
	}

	// Duplicates: literally "an earlier non-duplicate valid record r with the
	// same (type, event_id) and S(o) − r.time ≤ DedupHorizon".
	type id struct{ typ, id string }
	nonDup := map[id][]time.Time{}
	for _, x := range rs {
		if !x.valid {
			continue
		}
		k := id{x.ev.Type, x.ev.EventID}
		for _, rt := range nonDup[k] {
			if x.s.Sub(rt) <= cfg.DedupHorizon {
				x.dup = true
				break
			}
		}
		if x.dup {
			res.Duplicates = append(res.Duplicates, x.off)
		} else {
			nonDup[k] = append(nonDup[k], x.ev.Time)
		}
	}

	clicks := map[string][]*rec{}   // non-duplicate clicks per user, every offset
	installs := map[string][]*rec{} // non-duplicate installs per user
	for _, x := range rs {
		if x.valid && !x.dup {
			switch x.ev.Type {
			case attribution.TypeClick:
				clicks[x.ev.UserID] = append(clicks[x.ev.UserID], x)
			case attribution.TypeInstall:
				installs[x.ev.UserID] = append(installs[x.ev.UserID], x)
			}
		}
	}
	// A user's clicks in event-time order: an install looks only at those
	// within [t − Lookback, t] (inLookback), so a hot user's long history
	// costs each of its installs a binary search, not a pass.
	for _, cs := range clicks {
		slices.SortStableFunc(cs, func(a, b *rec) int { return a.ev.Time.Compare(b.ev.Time) })
	}
	arrival := func(c *rec) time.Time {
		if c.ev.Time.After(c.s) {
			return c.ev.Time
		}
		return c.s
	}
	later := func(a, b time.Time) time.Time {
		if a.After(b) {
			return a
		}
		return b
	}

	partition := int32(0)
	if len(sorted) > 0 {
		partition = sorted[0].Partition
	}
	for _, x := range rs {
		if !x.valid || x.dup {
			continue
		}
		t := x.ev.Time
		now := later(x.s, t)
		switch x.ev.Type {
		case attribution.TypeInstall:
			var win *rec
			for _, c := range inLookback(clicks[x.ev.UserID], t, cfg.Lookback) {
				ct := c.ev.Time
				if ct.After(t) ||
					t.Sub(ct) > cfg.Lookback ||
					now.Sub(ct) > cfg.Lookback+cfg.Lateness ||
					!(c.off < x.off || !arrival(c).After(t.Add(cfg.Lateness))) ||
					c.off >= x.h {
					continue
				}
				if win == nil || ct.After(win.ev.Time) || (ct.Equal(win.ev.Time) && c.off > win.off) {
					win = c
				}
			}
			out := attribution.InstallOutput{EventID: x.ev.EventID, UserID: x.ev.UserID, Time: t}
			if win != nil {
				x.attributed, x.campaign = true, win.ev.CampaignID
				out.Attributed = true
				out.ClickID, out.CampaignID, out.Channel, out.ClickTime =
					win.ev.EventID, win.ev.CampaignID, win.ev.Channel, win.ev.Time
			}
			res.Installs = append(res.Installs, Output{Partition: partition, Offset: x.off,
				Key: []byte(x.ev.UserID), Value: attribution.AppendInstall(nil, out)})
		case attribution.TypePurchase:
			win := latestRetained(installs[x.ev.UserID], x.off, now, cfg.InstallRetention)
			out := attribution.PurchaseOutput{EventID: x.ev.EventID, UserID: x.ev.UserID, Time: t,
				Revenue: x.ev.RevenueText, Currency: x.ev.Currency}
			if win != nil {
				out.InstallID, out.CampaignID = win.ev.EventID, win.campaign
			}
			res.Purchases = append(res.Purchases, Output{Partition: partition, Offset: x.off,
				Key: []byte(x.ev.UserID), Value: attribution.AppendPurchase(nil, out)})
		}
	}

	if cfg.Velocity.Enabled() {
		res.Alerts = velocity(rs, partition, cfg.Velocity)
	}

	// Final state: everything non-duplicate, then filtered by usability.
	var all attribution.Snapshot
	for _, x := range rs {
		if !x.valid || x.dup {
			continue
		}
		switch x.ev.Type {
		case attribution.TypeClick:
			all.Clicks = append(all.Clicks, attribution.StoredClick{UserID: x.ev.UserID, EventID: x.ev.EventID,
				Offset: x.off, Time: x.ev.Time, Arrival: arrival(x), CampaignID: x.ev.CampaignID, Channel: x.ev.Channel})
		case attribution.TypeInstall:
			all.Installs = append(all.Installs, attribution.StoredInstall{UserID: x.ev.UserID, EventID: x.ev.EventID,
				Offset: x.off, Time: x.ev.Time, CampaignID: x.campaign})
		}
	}
	for k, times := range nonDup {
		latest := times[0]
		for _, t := range times[1:] {
			latest = later(latest, t)
		}
		all.Seen = append(all.Seen, attribution.SeenEvent{Type: k.typ, EventID: k.id, Time: latest})
	}
	res.Final = Usable(all, stream, cfg)
	return res
}

// literal, set by a test, makes every match look at all of the user's
// clicks or installs, as the rules read: the indexed lookups below must
// find the same.
var literal bool

// inLookback returns the clicks of cs (in event-time order) with a time in
// [t − lookback, t]: every click an install at t may credit is one of them.
func inLookback(cs []*rec, t time.Time, lookback time.Duration) []*rec {
	if literal {
		return cs
	}
	lo := t.Add(-lookback)
	first := sort.Search(len(cs), func(i int) bool { return !cs[i].ev.Time.Before(lo) })
	end := sort.Search(len(cs), func(i int) bool { return cs[i].ev.Time.After(t) })
	return cs[first:end]
}

// latestRetained returns the install of ins (in offset order) with the
// largest offset below o that is retained at stream time now, or nil.
func latestRetained(ins []*rec, o int64, now time.Time, retention time.Duration) *rec {
	if literal {
		var win *rec
		for _, in := range ins {
			if in.off < o && now.Sub(in.ev.Time) <= retention && (win == nil || in.off > win.off) {
				win = in
			}
		}
		return win
	}
	before, _ := slices.BinarySearchFunc(ins, o, func(in *rec, o int64) int { return cmp.Compare(in.off, o) })
	for i := before - 1; i >= 0; i-- {
		if now.Sub(ins[i].ev.Time) <= retention {
			return ins[i]
		}
	}
	return nil
}

// Usable returns the entries of s that a rule can still use at stream time
// at (see the package doc), sorted.
func Usable(s attribution.Snapshot, at time.Time, cfg attribution.Config) attribution.Snapshot {
	var u attribution.Snapshot
	for _, c := range s.Clicks {
		if at.Sub(c.Time) <= cfg.Lookback+cfg.Lateness {
			u.Clicks = append(u.Clicks, c)
		}
	}
	for _, i := range s.Installs {
		if at.Sub(i.Time) <= cfg.InstallRetention {
			u.Installs = append(u.Installs, i)
		}
	}
	for _, d := range s.Seen {
		if at.Sub(d.Time) <= cfg.DedupHorizon {
			u.Seen = append(u.Seen, d)
		}
	}
	u.Sort()
	return u
}

// velocity applies the velocity rule (attribution.VelocityProcessor's doc)
// to the non-duplicate valid clicks, with a scan of the user's counted
// clicks per click: q(x) = ⌊x/Bucket⌋ in Unix nanoseconds; a click is late
// when S − t > Lateness; count = the user's counted clicks so far
// (itself included) with q(t) − Window/Bucket < q(time) ≤ q(t); an alert
// when count > Threshold and the user's last alert's arrival watermark is
// more than Window − 1ns before this click's max(S, t).
func velocity(rs []*rec, partition int32, v attribution.VelocityConfig) []Output {
	b := int64(v.Bucket)
	n := int64(v.Window) / b
	counted := map[string][]int64{} // per user: q of each counted click
	lastAlert := map[string]time.Time{}
	var out []Output
	for _, x := range rs {
		if !x.valid || x.dup || x.ev.Type != attribution.TypeClick {
			continue
		}
		t := x.ev.Time
		if !x.s.IsZero() && x.s.Sub(t) > v.Lateness {
			continue
		}
		u, q := x.ev.UserID, t.UnixNano()/b
		counted[u] = append(counted[u], q)
		var count int64
		for _, c := range counted[u] {
			if c > q-n && c <= q {
				count++
			}
		}
		if count <= v.Threshold {
			continue
		}
		arrival := t
		if x.s.After(t) {
			arrival = x.s
		}
		if last, ok := lastAlert[u]; ok && arrival.Sub(last) < v.Window {
			continue
		}
		lastAlert[u] = arrival
		out = append(out, Output{Partition: partition, Offset: x.off, Key: []byte(u),
			Value: attribution.AppendAlert(nil, attribution.AlertOutput{UserID: u, Window: windowString(v.Window),
				Count: count, Time: t, EventID: x.ev.EventID})})
	}
	return out
}

// windowString is Duration.String without zero trailing units ("1h", not
// "1h0m0s").
func windowString(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}
