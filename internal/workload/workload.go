package workload

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Config parameterises a workload.
type Config struct {
	Seed       uint64
	Records    int    // exact number of records generated
	Partitions int    // partitions of the topic
	Users      int    // distinct user ids
	Topic      string // Record.Topic
	// ZipfS is the skew of user popularity (rand Zipf parameter s, > 1);
	// <= 1 picks users uniformly.
	ZipfS float64
	// HotPartitions > 0 with HotFrac > 0: that fraction of user journeys
	// use only users that hash into partitions [0, HotPartitions).
	HotPartitions int
	HotFrac       float64
	// Start and Span: journeys start uniformly in [Start, Start+Span).
	Start time.Time
	Span  time.Duration
	// Journeys: clicks, then an install, then purchases.
	ClicksPerInstall    float64 // mean clicks of a non-organic journey (>= 1)
	PurchasesPerInstall float64 // mean purchases after an install
	OrganicFrac         float64 // journeys without clicks
	ReinstallFrac       float64 // journeys with a second install
	OrphanPurchaseFrac  float64 // journeys with a purchase before any install
	// ClickSpamFrac of journeys start with a click burst (see spam.go): the
	// user sends 20–150 clicks within 10–60 minutes, hours before the
	// install. Default 0 (the generator then draws exactly as before).
	ClickSpamFrac float64
	// LateClickFrac of clicks are produced late (after their event time by
	// minutes to days: inside and outside small latenesses, and beyond the
	// 7-day lookback).
	LateClickFrac float64
	// DupFrac of records are resends of an earlier record (same value),
	// from seconds to 9 days later (inside and outside a 7-day horizon).
	DupFrac float64
	// MalformedFrac of records are invalid, of every kind in MalformedKinds.
	// The kinds assume the attribution defaults where it matters: a
	// "future-time" event is FutureSkew (3h) after its Kafka timestamp and
	// 1% of valid events run up to 50 minutes ahead of theirs, so
	// MaxClockSkew must lie in [50m, 3h).
	MalformedFrac float64
	// MaxRecordBytes is the limit the "oversized" malformed records exceed
	// (they are MaxRecordBytes+1 bytes long).
	MaxRecordBytes int
	// CostMedian is the median of the per-record processing-cost draw
	// (log-normal, p99/p50 ≈ 50).
	CostMedian time.Duration
	// HeavyKeyShare > 0 makes one user, HeavyKey, take about that share of
	// the records of its partition (the all-zeros advertising ID, an
	// emulator, a click farm): its journeys have the usual shape, so over
	// the span it has thousands of clicks, installs and purchases inside
	// the attribution windows. 0 (the default) changes nothing.
	HeavyKeyShare float64
}

// HeavyKey is the user id of the heavy key (Config.HeavyKeyShare): the
// all-zeros advertising ID that devices with tracking disabled report.
const HeavyKey = "00000000-0000-0000-0000-000000000000"

// DefaultConfig is a 100k-record, 8-partition workload over three weeks.
func DefaultConfig() Config {
	return Config{
		Seed:                1,
		Records:             100_000,
		Partitions:          8,
		Users:               5_000,
		Topic:               "events",
		ZipfS:               1.1,
		Start:               time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC),
		Span:                21 * 24 * time.Hour,
		ClicksPerInstall:    3,
		PurchasesPerInstall: 1.5,
		OrganicFrac:         0.15,
		ReinstallFrac:       0.05,
		OrphanPurchaseFrac:  0.03,
		LateClickFrac:       0.1,
		DupFrac:             0.03,
		MalformedFrac:       0.01,
		MaxRecordBytes:      1 << 20,
		CostMedian:          100 * time.Microsecond,
	}
}

// Validate reports invalid fields.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("workload: "+format, args...))
		}
	}
	check(c.Records >= 0, "Records must be >= 0 (got %d)", c.Records)
	check(c.Partitions > 0, "Partitions must be > 0 (got %d)", c.Partitions)
	check(c.Users > 0, "Users must be > 0 (got %d)", c.Users)
	check(c.HotPartitions >= 0 && c.HotPartitions <= c.Partitions, "HotPartitions must be in [0, Partitions] (got %d)", c.HotPartitions)
	check(c.Span > 0, "Span must be > 0 (got %v)", c.Span)
	check(c.ClicksPerInstall >= 1, "ClicksPerInstall must be >= 1 (got %v)", c.ClicksPerInstall)
	check(c.PurchasesPerInstall >= 0, "PurchasesPerInstall must be >= 0 (got %v)", c.PurchasesPerInstall)
	for _, f := range []struct {
		name string
		v    float64
	}{{"HotFrac", c.HotFrac}, {"OrganicFrac", c.OrganicFrac}, {"ReinstallFrac", c.ReinstallFrac},
		{"OrphanPurchaseFrac", c.OrphanPurchaseFrac}, {"LateClickFrac", c.LateClickFrac},
		{"DupFrac", c.DupFrac}, {"MalformedFrac", c.MalformedFrac}, {"ClickSpamFrac", c.ClickSpamFrac}} {
		check(f.v >= 0 && f.v <= 1, "%s must be in [0, 1] (got %v)", f.name, f.v)
	}
	check(c.DupFrac+c.MalformedFrac < 1, "DupFrac+MalformedFrac must be < 1")
	check(c.MaxRecordBytes > 0, "MaxRecordBytes must be > 0 (got %d)", c.MaxRecordBytes)
	check(c.CostMedian >= 0, "CostMedian must be >= 0 (got %v)", c.CostMedian)
	check(c.HeavyKeyShare >= 0 && c.HeavyKeyShare < 1, "HeavyKeyShare must be in [0, 1) (got %v)", c.HeavyKeyShare)
	return errors.Join(errs...)
}

// String is a one-line summary, e.g. for benchmark reports.
func (c Config) String() string {
	return fmt.Sprintf("seed=%d records=%d partitions=%d users=%d zipf=%g hot=%d/%g start=%s span=%v "+
		"clicks/install=%g purchases/install=%g organic=%g reinstall=%g orphan=%g late=%g dup=%g malformed=%g "+
		"maxbytes=%d cost-median=%v",
		c.Seed, c.Records, c.Partitions, c.Users, c.ZipfS, c.HotPartitions, c.HotFrac,
		c.Start.UTC().Format(time.RFC3339), c.Span, c.ClicksPerInstall, c.PurchasesPerInstall,
		c.OrganicFrac, c.ReinstallFrac, c.OrphanPurchaseFrac, c.LateClickFrac, c.DupFrac, c.MalformedFrac,
		c.MaxRecordBytes, c.CostMedian) + c.heavyString() + c.spamString()
}

func (c Config) heavyString() string {
	if c.HeavyKeyShare == 0 {
		return ""
	}
	return fmt.Sprintf(" heavy-key=%g", c.HeavyKeyShare)
}

func (c Config) spamString() string {
	if c.ClickSpamFrac == 0 {
		return ""
	}
	return fmt.Sprintf(" click-spam=%g", c.ClickSpamFrac)
}

// Record is a generated Kafka record.
type Record struct {
	chain.Record
	// Kind says what the generator meant, e.g. "click", "click/late",
	// "install/reinstall", "purchase/orphan", "dup", "malformed/bad-json".
	Kind string
	// Cost is the record's processing-cost draw (see CostSigma).
	Cost time.Duration
}

// CostSigma is the log-normal sigma of the cost draw: p99/p50 =
// exp(2.326·sigma) = 50.
var CostSigma = math.Log(50) / 2.326

// MalformedKinds lists the invalid records the generator produces.
var MalformedKinds = []string{
	"bad-json", "trailing-data", "not-object", "unknown-type", "missing-event-id", "empty-user-id",
	"mistyped-event-id", "missing-time", "bad-time", "mistyped-time", "future-time",
	"click-no-campaign", "mistyped-channel", "purchase-negative-revenue", "purchase-string-revenue",
	"purchase-missing-revenue", "purchase-bad-currency", "oversized", "key-mismatch",
}

// FutureSkew is how far after its record timestamp a "future-time" record's
// event time is; it exceeds the default MaxClockSkew (1h).
const FutureSkew = 3 * time.Hour

// Partition is sarama's default (NewHashPartitioner) partition of a key:
// FNV-1a 32 of the key, as int32, modulo n, negated if negative.
func Partition(key []byte, n int32) int32 {
	h := fnv.New32a()
	h.Write(key)
	p := int32(h.Sum32()) % n
	if p < 0 {
		p = -p
	}
	return p
}

// Split groups records by partition, each in offset order.
func Split(recs []Record, partitions int) [][]chain.Record {
	out := make([][]chain.Record, partitions)
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], r.Record)
	}
	return out
}

type event struct {
	at   time.Time // production time (order of the log)
	ts   time.Time // Kafka timestamp
	seq  int
	key  string
	val  []byte
	kind string
	// for resends
	valid bool
}

type gen struct {
	cfg   Config
	rng   *rand.Rand
	zipf  *rand.Zipf
	hot   []int // users of the hot partitions
	evs   []event
	ids   int
	users []string
	// heavyP is the probability that a journey is HeavyKey's.
	heavyP float64
}

const day = 24 * time.Hour

// Generate returns cfg.Records records in production order, with
// partitions and per-partition offsets assigned. It panics if cfg is invalid.
func Generate(cfg Config) []Record {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.Topic == "" {
		cfg.Topic = "events"
	}
	g := &gen{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	g.users = make([]string, cfg.Users)
	for i := range g.users {
		g.users[i] = "u" + strconv.Itoa(i)
	}
	if cfg.ZipfS > 1 && cfg.Users > 1 {
		g.zipf = rand.NewZipf(g.rng, cfg.ZipfS, 1, uint64(cfg.Users-1))
	}
	if cfg.HotPartitions > 0 && cfg.HotFrac > 0 {
		for i, u := range g.users {
			if int(Partition([]byte(u), int32(cfg.Partitions))) < cfg.HotPartitions {
				g.hot = append(g.hot, i)
			}
		}
	}
	if cfg.HeavyKeyShare > 0 {
		g.heavyP = g.heavyProbability()
	}
	base := float64(cfg.Records) * (1 - cfg.DupFrac - cfg.MalformedFrac)
	for float64(len(g.evs)) < base*1.02+1 && cfg.Records > 0 {
		g.journey()
	}
	valid := len(g.evs)
	nDup := int(float64(cfg.Records) * cfg.DupFrac)
	for i := 0; i < nDup && valid > 0; i++ {
		g.dup(valid)
	}
	nBad := int(float64(cfg.Records)*cfg.MalformedFrac + 0.5)
	for i := 0; i < nBad; i++ {
		g.malformed(MalformedKinds[i%len(MalformedKinds)])
	}
	for len(g.evs) < cfg.Records {
		g.journey()
	}
	sort.SliceStable(g.evs, func(i, j int) bool {
		a, b := g.evs[i], g.evs[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.seq < b.seq
	})
	// Keep every malformed record (they are few and each kind matters),
	// and trim valid ones to reach exactly Records.
	extra := len(g.evs) - cfg.Records
	out := make([]Record, 0, cfg.Records)
	kept := make([]event, 0, len(g.evs))
	for i := len(g.evs) - 1; i >= 0; i-- {
		if extra > 0 && !strings.HasPrefix(g.evs[i].kind, "malformed/") {
			extra--
			continue
		}
		kept = append(kept, g.evs[i])
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	if len(kept) > cfg.Records {
		kept = kept[len(kept)-cfg.Records:]
	}
	costRNG := rand.New(rand.NewPCG(cfg.Seed, 0xc057))
	next := make([]int64, cfg.Partitions)
	for _, e := range kept {
		p := Partition([]byte(e.key), int32(cfg.Partitions))
		r := Record{
			Record: chain.Record{Topic: cfg.Topic, Partition: p, Offset: next[p], Key: []byte(e.key),
				Value: e.val, Timestamp: e.ts},
			Kind: e.kind,
			Cost: time.Duration(float64(cfg.CostMedian) * math.Exp(CostSigma*costRNG.NormFloat64())),
		}
		next[p]++
		out = append(out, r)
	}
	return out
}

// CountKinds counts records by Kind.
func CountKinds(recs []Record) map[string]int {
	m := map[string]int{}
	for _, r := range recs {
		m[r.Kind]++
	}
	return m
}

// heavyProbability is the share p of journeys to give HeavyKey so that it
// has HeavyKeyShare of its partition's: p / (p + (1−p)·q) = share, where q
// is the probability that user() picks a user of that partition.
func (g *gen) heavyProbability() float64 {
	cfg := g.cfg
	part := Partition([]byte(HeavyKey), int32(cfg.Partitions))
	in := func(i int) bool { return Partition([]byte(g.users[i]), int32(cfg.Partitions)) == part }
	// The distribution user() draws from without the hot partitions.
	var q, total float64
	for i := range g.users {
		w := 1.0
		if g.zipf != nil {
			w = math.Pow(float64(1+i), -cfg.ZipfS) // rand.Zipf with v = 1
		}
		total += w
		if in(i) {
			q += w
		}
	}
	q /= total
	if len(g.hot) > 0 {
		hot := 0
		for _, i := range g.hot {
			if in(i) {
				hot++
			}
		}
		q = cfg.HotFrac*float64(hot)/float64(len(g.hot)) + (1-cfg.HotFrac)*q
	}
	s := cfg.HeavyKeyShare
	return s * q / (1 - s + s*q)
}

func (g *gen) user() string {
	if g.heavyP > 0 && g.rng.Float64() < g.heavyP {
		return HeavyKey
	}
	if len(g.hot) > 0 && g.rng.Float64() < g.cfg.HotFrac {
		return g.users[g.hot[g.rng.IntN(len(g.hot))]]
	}
	if g.zipf != nil {
		return g.users[g.zipf.Uint64()]
	}
	return g.users[g.rng.IntN(len(g.users))]
}

func (g *gen) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)))
}

func (g *gen) id(prefix string) string {
	g.ids++
	return prefix + strconv.Itoa(g.ids)
}

// add appends an event produced at "at" (Kafka timestamp = at, ms precision
// as Kafka stores it).
func (g *gen) add(at time.Time, key string, val []byte, kind string) {
	ts := at.Truncate(time.Millisecond)
	g.evs = append(g.evs, event{at: at, ts: ts, seq: len(g.evs), key: key, val: val, kind: kind, valid: !strings.HasPrefix(kind, "malformed/")})
}

// produce is the production time of an on-time event: event time plus up
// to 2s; 1% of events come from a device whose clock runs ahead (event time
// up to 50 minutes after the record timestamp, still within the default
// MaxClockSkew).
func (g *gen) produce(t time.Time) (time.Time, string) {
	if g.rng.Float64() < 0.01 {
		return t.Add(-g.uniform(0, 50*time.Minute)), "/clock-ahead"
	}
	return t.Add(g.uniform(0, 2*time.Second)), ""
}

func (g *gen) timeString(t time.Time) string {
	switch x := g.rng.IntN(10); {
	case x < 5:
		return t.UTC().Truncate(time.Second).Format(time.RFC3339)
	case x < 8:
		return t.UTC().Format(time.RFC3339Nano)
	default:
		return t.In(time.FixedZone("", (g.rng.IntN(27)-12)*3600)).Format(time.RFC3339Nano)
	}
}

func quoted(s string) string { return `"` + s + `"` }

func (g *gen) extras(b *strings.Builder) {
	switch x := g.rng.IntN(40); {
	case x == 0:
		b.WriteString(`,"meta":{"a":[1,2.5e3,{"b":null,"c":true}],"d":"caf\u00e9 \"q\""}`)
	case x == 1:
		b.WriteString(`,"Event_ID":"ignored","x":-0.0`)
	case x < 4:
		b.WriteString(`,"sdk":"ios-17.2"`)
	}
}

type fields struct {
	id, typ, user, time, campaign, channel, revenue, currency string
	app                                                       bool
}

func (g *gen) encode(f fields) []byte {
	var b strings.Builder
	b.WriteString(`{"event_id":` + quoted(f.id) + `,"type":` + quoted(f.typ) + `,"user_id":` + quoted(f.user) + `,"time":` + quoted(f.time))
	if f.campaign != "" {
		b.WriteString(`,"campaign_id":` + quoted(f.campaign))
	}
	if f.channel != "" {
		b.WriteString(`,"channel":` + quoted(f.channel))
	}
	if f.app {
		b.WriteString(`,"app_id":"app-1"`)
	}
	if f.revenue != "" {
		b.WriteString(`,"revenue":` + f.revenue)
	}
	if f.currency != "" {
		b.WriteString(`,"currency":` + quoted(f.currency))
	}
	g.extras(&b)
	b.WriteString("}")
	return []byte(b.String())
}

var channels = []string{"search", "social", "video", "display", ""}
var currencies = []string{"USD", "EUR", "JPY", "gbp"}

func (g *gen) revenue() string {
	switch x := g.rng.IntN(10); {
	case x == 0:
		return "0"
	case x < 3:
		return strconv.Itoa(g.rng.IntN(200))
	default:
		return strconv.FormatFloat(float64(g.rng.IntN(100000))/100, 'f', 2, 64)
	}
}

func (g *gen) click(user string, t time.Time, kind string) {
	at, suffix := g.produce(t)
	if g.rng.Float64() < g.cfg.LateClickFrac {
		var d time.Duration
		switch x := g.rng.IntN(10); {
		case x < 4:
			d = g.uniform(0, 5*time.Minute)
		case x < 7:
			d = g.uniform(5*time.Minute, 2*time.Hour)
		case x < 9:
			d = g.uniform(2*time.Hour, 2*day)
		default:
			d = g.uniform(6*day, 9*day)
		}
		at, suffix = t.Add(d), "/late"
	}
	g.add(at, user, g.encode(fields{id: g.id("c"), typ: "click", user: user, time: g.timeString(t),
		campaign: "cmp-" + strconv.Itoa(g.rng.IntN(50)), channel: channels[g.rng.IntN(len(channels))]}), kind+suffix)
}

func (g *gen) install(user string, t time.Time, kind string) {
	at, suffix := g.produce(t)
	g.add(at, user, g.encode(fields{id: g.id("i"), typ: "install", user: user, time: g.timeString(t),
		app: g.rng.IntN(3) == 0}), kind+suffix)
}

func (g *gen) purchase(user string, t time.Time, kind string) {
	at, suffix := g.produce(t)
	g.add(at, user, g.encode(fields{id: g.id("p"), typ: "purchase", user: user, time: g.timeString(t),
		revenue: g.revenue(), currency: currencies[g.rng.IntN(len(currencies))]}), kind+suffix)
}

// journey: clicks, an install, purchases (and the variants).
func (g *gen) journey() {
	cfg := g.cfg
	user := g.user()
	// Times have random sub-second parts; some have whole seconds only.
	ti := cfg.Start.Add(g.uniform(0, cfg.Span))
	if g.rng.IntN(2) == 0 {
		ti = ti.Truncate(time.Second)
	}
	if g.rng.Float64() < cfg.OrphanPurchaseFrac {
		g.purchase(user, ti.Add(-g.uniform(time.Hour, day)), "purchase/orphan")
	}
	if cfg.ClickSpamFrac > 0 && g.rng.Float64() < cfg.ClickSpamFrac {
		g.spam(user, ti)
	}
	if g.rng.Float64() >= cfg.OrganicFrac {
		n := 1 + int(g.rng.ExpFloat64()*(cfg.ClicksPerInstall-1)+0.5)
		var prev time.Time
		for k := 0; k < n; k++ {
			var back time.Duration
			switch x := g.rng.IntN(100); {
			case x < 60:
				back = g.uniform(0, 2*day)
			case x < 75:
				back = g.uniform(2*day, 7*day)
			case x < 80:
				back = 7 * day // exactly the default lookback (inclusive edge)
			case x < 85:
				back = g.uniform(7*day-time.Hour, 7*day+time.Hour)
			case x < 92:
				back = g.uniform(7*day, 10*day) // outside the lookback
			case x < 96:
				back = -g.uniform(0, time.Hour) // after the install
			default:
				back = 0 // same time as the install
			}
			ct := ti.Add(-back)
			if k > 0 && g.rng.IntN(20) == 0 {
				ct = prev // tie with the previous click
			}
			prev = ct
			g.click(user, ct, "click")
		}
	}
	g.install(user, ti, "install")
	if g.rng.Float64() < cfg.ReinstallFrac {
		g.install(user, ti.Add(g.uniform(time.Hour, 20*day)), "install/reinstall")
	}
	m := int(g.rng.ExpFloat64()*cfg.PurchasesPerInstall + 0.5)
	for k := 0; k < m; k++ {
		d := time.Duration(g.rng.ExpFloat64() * float64(3*day))
		if g.rng.IntN(20) == 0 {
			d = g.uniform(25*day, 40*day) // around the 30-day retention
		}
		g.purchase(user, ti.Add(d), "purchase")
	}
}

// dup resends one of the first n (valid) events later.
func (g *gen) dup(n int) {
	orig := g.evs[g.rng.IntN(n)]
	var d time.Duration
	switch x := g.rng.IntN(10); {
	case x < 5:
		d = g.uniform(0, time.Hour)
	case x < 8:
		d = g.uniform(time.Hour, 6*day)
	default:
		d = g.uniform(6*day, 9*day)
	}
	g.add(orig.at.Add(d), orig.key, orig.val, "dup")
}

func (g *gen) malformed(kind string) {
	cfg := g.cfg
	user := g.user()
	t := cfg.Start.Add(g.uniform(0, cfg.Span))
	at := t.Add(g.uniform(0, 2*time.Second))
	ts := quoted(t.UTC().Format(time.RFC3339Nano))
	id := quoted(g.id("m"))
	u := quoted(user)
	key := user
	var v string
	switch kind {
	case "bad-json":
		v = `{"event_id":` + id + `,"type":"cli`
	case "trailing-data":
		v = `{"event_id":` + id + `,"type":"install","user_id":` + u + `,"time":` + ts + `} x`
	case "not-object":
		v = `["click",` + id + `]`
	case "unknown-type":
		v = `{"event_id":` + id + `,"type":"view","user_id":` + u + `,"time":` + ts + `}`
	case "missing-event-id":
		v = `{"type":"install","user_id":` + u + `,"time":` + ts + `}`
	case "empty-user-id":
		v = `{"event_id":` + id + `,"type":"install","user_id":"","time":` + ts + `}`
	case "mistyped-event-id":
		v = `{"event_id":12345,"type":"install","user_id":` + u + `,"time":` + ts + `}`
	case "missing-time":
		v = `{"event_id":` + id + `,"type":"install","user_id":` + u + `}`
	case "bad-time":
		v = `{"event_id":` + id + `,"type":"install","user_id":` + u + `,"time":"` + t.UTC().Format("2006-01-02 15:04:05") + `"}`
	case "mistyped-time":
		v = `{"event_id":` + id + `,"type":"install","user_id":` + u + `,"time":` + strconv.FormatInt(t.Unix(), 10) + `}`
	case "future-time":
		v = `{"event_id":` + id + `,"type":"click","user_id":` + u + `,"time":` + quoted(at.Add(FutureSkew).UTC().Format(time.RFC3339Nano)) + `,"campaign_id":"cmp-1"}`
	case "click-no-campaign":
		v = `{"event_id":` + id + `,"type":"click","user_id":` + u + `,"time":` + ts + `,"channel":"search"}`
	case "mistyped-channel":
		v = `{"event_id":` + id + `,"type":"click","user_id":` + u + `,"time":` + ts + `,"campaign_id":"cmp-1","channel":7}`
	case "purchase-negative-revenue":
		v = `{"event_id":` + id + `,"type":"purchase","user_id":` + u + `,"time":` + ts + `,"revenue":-1.5,"currency":"USD"}`
	case "purchase-string-revenue":
		v = `{"event_id":` + id + `,"type":"purchase","user_id":` + u + `,"time":` + ts + `,"revenue":"4.99","currency":"USD"}`
	case "purchase-missing-revenue":
		v = `{"event_id":` + id + `,"type":"purchase","user_id":` + u + `,"time":` + ts + `,"currency":"USD"}`
	case "purchase-bad-currency":
		cur := []string{"US", "EURO", "U$D", ""}[g.rng.IntN(4)]
		v = `{"event_id":` + id + `,"type":"purchase","user_id":` + u + `,"time":` + ts + `,"revenue":1,"currency":` + quoted(cur) + `}`
	case "oversized":
		head := `{"event_id":` + id + `,"type":"install","user_id":` + u + `,"time":` + ts + `,"pad":"`
		pad := cfg.MaxRecordBytes + 1 - len(head) - 2
		if pad < 0 {
			pad = 0
		}
		v = head + strings.Repeat("x", pad) + `"}`
	case "key-mismatch":
		v = `{"event_id":` + id + `,"type":"install","user_id":` + u + `,"time":` + ts + `}`
		key = user + "-other"
	default:
		panic("workload: unknown malformed kind " + kind)
	}
	g.add(at, key, []byte(v), "malformed/"+kind)
}
