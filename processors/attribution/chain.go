package attribution

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Chain returns the click → install → purchase stages (names StageClick,
// StageInstall, StagePurchase), each filtering by Decoded.Type, for a chain
// whose Decoder is Decoder(cfg). With cfg.Velocity enabled, the velocity
// stage (StageVelocity, VelocityProcessor, filtering clicks) runs between
// click and install: click → velocity → install → purchase. It panics if
// cfg is invalid (see Config.Validate). The processors are safe for
// KeyConcurrency > 1 and for the key-scoped gate, which every follower
// uses (Gate = chain.GateKey: an install waits only for its own user's
// clicks, a purchase for its own user's installs, the velocity stage for
// its user's clicks); the engine's follower gate must use cfg.Lateness.
func Chain(cfg Config, opts ...ChainOption) []chain.Stage {
	cfg.mustValidate("attribution.Chain")
	var o chainOptions
	for _, opt := range opts {
		opt(&o)
	}
	// Each stage's deduplication keys are its own (Stage.Private): a
	// leader's expire at its own watermark, not at the last follower's.
	stages := []chain.Stage{
		{Name: StageClick, Filter: typeFilter(TypeClick), Processor: &ClickProcessor{cfg: cfg},
			Private: []string{seenPrefix(TypeClick)}},
		{Name: StageInstall, Filter: typeFilter(TypeInstall), Processor: &InstallProcessor{cfg: cfg}, Gate: chain.GateKey,
			Private: []string{seenPrefix(TypeInstall)}},
		{Name: StagePurchase, Filter: typeFilter(TypePurchase), Processor: &PurchaseProcessor{cfg: cfg}, Gate: chain.GateKey,
			Private: []string{seenPrefix(TypePurchase)}},
	}
	if cfg.Velocity.Enabled() {
		vp, err := NewVelocityProcessor(cfg, o.alertsTopic)
		if err != nil {
			panic("attribution.Chain: " + err.Error()) // cfg was validated above
		}
		stages = append(stages[:1], append([]chain.Stage{
			{Name: StageVelocity, Filter: typeFilter(TypeClick), Processor: vp, Gate: chain.GateKey,
				Private: []string{VelocityKeyPrefix, string(vp.counter.StateKey(""))}}}, stages[1:]...)...)
	}
	return stages
}

// ChainOption configures Chain beyond the rules.
type ChainOption func(*chainOptions)

type chainOptions struct {
	alertsTopic string
}

// AlertsTopic sets the topic of the velocity stage's alerts. Default "":
// the chain's output topic.
func AlertsTopic(topic string) ChainOption {
	return func(o *chainOptions) { o.alertsTopic = topic }
}

// VelocityOf returns the velocity stage's processor among stages (as
// Chain returns them, possibly wrapped by the caller: it looks at the
// stage named StageVelocity), or nil when there is none.
func VelocityOf(stages []chain.Stage) *VelocityProcessor {
	for _, s := range stages {
		if s.Name == StageVelocity {
			if vp, ok := s.Processor.(*VelocityProcessor); ok {
				return vp
			}
		}
	}
	return nil
}

func typeFilter(typ string) func(ev *chain.Event) bool {
	return func(ev *chain.Event) bool { return ev.Type == typ }
}

var sourceHeaderKey = []byte(SourceHeader)

// payload returns the decoded event; anything else is a wiring error.
func payload(ev *chain.Event) (*Event, error) {
	e, ok := ev.Payload.(*Event)
	if !ok || e == nil {
		return nil, chain.Fatal(fmt.Errorf("attribution: event payload is %T, not *attribution.Event (the chain must use attribution.Decoder)", ev.Payload))
	}
	return e, nil
}

func corrupt(key []byte, err error) error {
	return chain.Fatal(fmt.Errorf("attribution: state %q: %w", key, err))
}

// usable reports whether an entry of time t is still usable at stream time
// wm by a rule with window w: wm − t ≤ w.
func usable(t, wm time.Time, w time.Duration) bool { return !wm.After(t.Add(w)) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sequence is the shared deduplication (DESIGN.md "Attribution rules", duplicates): a record is
// a duplicate when an earlier non-duplicate record with the same (type,
// event_id) has S(o) − time ≤ DedupHorizon. The state keeps, per (type,
// event_id), the latest time of its non-duplicate records, which decides
// the rule on its own. State errors are Fatal: the engine dead-letters
// Sequence errors without retrying, and a store failure must not silently
// drop records.
func sequence(cfg *Config, pc *chain.Context, ev *chain.Event) (bool, error) {
	e, err := payload(ev)
	if err != nil {
		return false, err
	}
	sc := getScratch()
	defer putScratch(sc)
	sc.key = appendSeenKey(sc.key[:0], e.Type, e.EventID)
	return dedup(cfg, pc, e, sc.key)
}

// dedup applies the duplicate rule to e with its (type, event_id) state at
// key.
func dedup(cfg *Config, pc *chain.Context, e *Event, key []byte) (bool, error) {
	st := pc.State()
	v, ok, err := st.Get(key)
	if err != nil {
		return false, chain.Fatal(fmt.Errorf("attribution: get %q: %w", key, err))
	}
	latest := e.Time
	if ok {
		seen, err := decodeSeen(v)
		if err != nil {
			return false, corrupt(key, err)
		}
		if usable(seen, pc.StreamTime(), cfg.DedupHorizon) {
			return true, nil
		}
		latest = maxTime(seen, e.Time)
	}
	if err := st.Set(key, encodeSeen(latest), latest.Add(cfg.DedupHorizon)); err != nil {
		return false, chain.Fatal(fmt.Errorf("attribution: set %q: %w", key, err))
	}
	return false, nil
}

// output is the memory of one output message, allocated once rather than
// once per slice: the array of its headers and a buffer that its key, its
// source header's value and its JSON value are cut from in turn (each
// capped where the next begins, so that an append to one copies instead of
// writing over the next). A value too long for the rest of buf grows into
// an allocation of its own.
type output struct {
	headers [1]chain.Header
	buf     [outputBuf]byte
}

// outputBuf holds a user id, a source and an install output with ids of
// ordinary lengths.
const outputBuf = 400

// newOutput returns the message of an output to user, with its key and
// source header, and the empty buffer to append its value to.
func newOutput(pc *chain.Context, user string) (chain.Message, []byte) {
	o := new(output)
	b := append(o.buf[:0], user...)
	key := b[:len(b):len(b)]
	b = appendSource(b, pc.Partition(), pc.Offset())
	o.headers[0] = chain.Header{Key: sourceHeaderKey, Value: b[len(key):len(b):len(b)]}
	return chain.Message{Key: key, Headers: o.headers[:]}, b[len(b):]
}

// scratch is the memory one Process or Sequence call reuses: key buffers
// and the reverse scans' callbacks, bound to the scratch once, with the
// variables they read and fill. A closure per scan would be allocated, and
// so would every variable it captures. The processors run on many key
// workers at once, so each call takes a scratch of its own from the pool.
type scratch struct {
	key, lo, hi []byte
	text        []byte   // strings' bytes, gathered to be copied at once
	ids         []string // strings' result

	// The scans' inputs: n is the length of the scanned user's key prefix.
	n               int
	o, h, lateLimit int64
	now             time.Time
	ret             time.Duration
	// Their results, and the first error a callback met.
	install  InstallOutput
	purchase PurchaseOutput
	latest   time.Time
	err      error

	winningClick, latestInstall, usableInstall func(k, v []byte) bool
}

var scratches = sync.Pool{New: func() any {
	sc := new(scratch)
	sc.winningClick, sc.latestInstall, sc.usableInstall = sc.visitClick, sc.visitLatestInstall, sc.visitUsableInstall
	return sc
}}

// strings copies bs into strings that share one allocation, and returns
// them in a slice valid until the next call.
func (sc *scratch) strings(bs ...[]byte) []string {
	sc.text = sc.text[:0]
	for _, b := range bs {
		sc.text = append(sc.text, b...)
	}
	all := string(sc.text)
	sc.ids = sc.ids[:0]
	for _, b := range bs {
		sc.ids = append(sc.ids, all[:len(b)])
		all = all[len(b):]
	}
	return sc.ids
}

func getScratch() *scratch { return scratches.Get().(*scratch) }

// putScratch returns sc to the pool, without references to the record's
// strings.
func putScratch(sc *scratch) {
	sc.install, sc.purchase, sc.latest, sc.err = InstallOutput{}, PurchaseOutput{}, time.Time{}, nil
	clear(sc.ids)
	scratches.Put(sc)
}

// ClickProcessor is the click stage: it stores each non-duplicate click
// under its own key.
type ClickProcessor struct{ cfg Config }

// Sequence deduplicates clicks.
func (p *ClickProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process stores the click under (user, time, offset) with its arrival
// watermark max(S(o), t), event id, campaign and channel: one write, no
// read, whatever the user stored before. It expires once no install can use
// it: time + Lookback + Lateness. A click that no install can use any more
// (EvictionWatermark − time > Lookback+Lateness) is not stored. A repeated
// Process writes the same key and value again.
func (p *ClickProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	win := p.cfg.clickWindow()
	if !usable(e.Time, pc.EvictionWatermark(), win) {
		return nil
	}
	sc := getScratch()
	defer putScratch(sc)
	sc.key = appendClickKey(sc.key[:0], e.UserID, e.Time.UnixNano(), pc.Offset())
	return pc.State().Set(sc.key, encodeClick(maxTime(pc.StreamTime(), e.Time), e), e.Time.Add(win))
}

// InstallProcessor is the install stage: it attributes each non-duplicate
// install to a click, emits the install output and stores the install.
type InstallProcessor struct{ cfg Config }

// Sequence deduplicates installs.
func (p *InstallProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process applies DESIGN.md "Attribution rules" install rule. Candidates are the user's
// stored clicks with time ≤ t, t − time ≤ Lookback, max(S(o), t) − time ≤
// Lookback+Lateness, (offset < o or arrival ≤ t+Lateness) and offset <
// the record's horizon (chain.Context.Horizon: the click stage's position
// the gate's rule needs — a click at or past it fails the fourth
// condition anyway — or, when smaller, the position past a gap where the
// log shows the click stage idle after the install); the winner has the latest time,
// ties to the larger offset. The engine's gate guarantees every candidate
// is stored; stored clicks that are not candidates (e.g. at offsets > o
// that arrived too late, or past the horizon) are ignored, so the output
// is the same however far the click stage had run.
//
// The first three conditions bound the click's time, which leads its key
// after the user: one reverse scan of that range, newest first, stops at
// the first click that also meets the fourth — the winner. It passes only
// the clicks that sort above the winner and fail the fourth condition
// (stored ahead of the install, arrived after t+Lateness).
func (p *InstallProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	st := pc.State()
	o, t, s := pc.Offset(), e.Time, pc.StreamTime()
	sc := getScratch()
	defer putScratch(sc)
	sc.install = InstallOutput{EventID: e.EventID, UserID: e.UserID, Time: t}
	if err := p.attribute(sc, st, o, pc.Horizon(), e, maxTime(s, t)); err != nil {
		return err
	}
	// A purchase uses installs at offsets below its own, so its S is at
	// least max(S(o), t): an install unusable there is never used.
	if ret := p.cfg.InstallRetention; usable(t, s, ret) {
		maxT, err := p.latestInstallTime(sc, st, e.UserID, o)
		if err != nil {
			return err
		}
		sc.key = appendInstallKey(sc.key[:0], e.UserID, o)
		if err := st.Set(sc.key, encodeInstall(t, maxTime(maxT, t), e.EventID, sc.install.CampaignID), t.Add(ret)); err != nil {
			return err
		}
	}
	m, b := newOutput(pc, e.UserID)
	m.Value = AppendInstall(b, sc.install)
	pc.Emit(m)
	return nil
}

// attribute fills sc.install's click fields with the winning click, if
// any, among the clicks below the horizon h.
func (p *InstallProcessor) attribute(sc *scratch, st chain.State, o, h int64, e *Event, now time.Time) error {
	t := e.Time
	from := maxTime(t.Add(-p.cfg.Lookback), now.Add(-p.cfg.clickWindow()))
	if from.After(t) {
		return nil // nothing can be usable
	}
	lo := appendUser(sc.lo[:0], ClickKeyPrefix, e.UserID)
	n := len(lo)
	lo = appendBE(lo, max(from.UnixNano(), 0))
	hi := appendBE(append(sc.hi[:0], lo[:n]...), t.UnixNano()+1)
	sc.lo, sc.hi = lo, hi
	sc.n, sc.o, sc.h, sc.lateLimit = n, o, h, t.Add(p.cfg.Lateness).UnixNano()
	if serr := st.ScanReverse(lo, hi, sc.winningClick); serr != nil {
		return fmt.Errorf("attribution: scan clicks of %q: %w", e.UserID, serr)
	}
	return sc.err
}

// visitClick is attribute's callback: it stops at the winner.
func (sc *scratch) visitClick(k, v []byte) bool {
	c, err := decodeClick(k[sc.n:], v)
	if err != nil {
		sc.err = corrupt(k, err)
		return false
	}
	if c.offset > sc.o && c.arrival > sc.lateLimit {
		return true // arrived after the install's lateness limit
	}
	if c.offset >= sc.h {
		return true // after the log showed the click stage idle
	}
	out := &sc.install
	out.Attributed = true
	ids := sc.strings(c.eventID, c.campaign, c.channel)
	out.ClickID, out.CampaignID, out.Channel = ids[0], ids[1], ids[2]
	out.ClickTime = time.Unix(0, c.time).UTC()
	return false
}

// latestInstallTime returns the latest time among the user's stored
// installs at offsets below o (zero if none): the max time the latest of
// them carries.
func (p *InstallProcessor) latestInstallTime(sc *scratch, st chain.State, user string, o int64) (time.Time, error) {
	lo := appendUser(sc.lo[:0], InstallKeyPrefix, user)
	n := len(lo)
	hi := appendBE(append(sc.hi[:0], lo...), o)
	sc.lo, sc.hi, sc.n = lo, hi, n
	sc.latest, sc.err = time.Time{}, nil
	if serr := st.ScanReverse(lo, hi, sc.latestInstall); serr != nil {
		return time.Time{}, fmt.Errorf("attribution: scan installs of %q: %w", user, serr)
	}
	return sc.latest, sc.err
}

// visitLatestInstall is latestInstallTime's callback: the first install
// decides.
func (sc *scratch) visitLatestInstall(k, v []byte) bool {
	if in, err := decodeInstall(k[sc.n:], v); err != nil {
		sc.err = corrupt(k, err)
	} else {
		sc.latest = time.Unix(0, in.maxTime)
	}
	return false
}

// PurchaseProcessor is the purchase stage: it attributes each non-duplicate
// purchase to an install and emits the purchase output. It writes no state
// besides deduplication.
type PurchaseProcessor struct{ cfg Config }

// Sequence deduplicates purchases.
func (p *PurchaseProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process applies DESIGN.md "Attribution rules" purchase rule: among the user's stored
// installs at offsets < o with max(S(o), t) − time ≤ InstallRetention, the
// one at the largest offset (the latest in the log). A reverse scan from o
// takes the first usable install; it stops early when an install's max time
// (the latest time at or below its offset) is itself unusable, since then
// none below is usable. In-log-order installs make it one step.
func (p *PurchaseProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	o := pc.Offset()
	sc := getScratch()
	defer putScratch(sc)
	sc.now, sc.ret = maxTime(pc.StreamTime(), e.Time), p.cfg.InstallRetention
	sc.purchase = PurchaseOutput{EventID: e.EventID, UserID: e.UserID, Time: e.Time, Revenue: e.RevenueText, Currency: e.Currency}
	lo := appendUser(sc.lo[:0], InstallKeyPrefix, e.UserID)
	n := len(lo)
	hi := appendBE(append(sc.hi[:0], lo...), o)
	sc.lo, sc.hi, sc.n = lo, hi, n
	if serr := pc.State().ScanReverse(lo, hi, sc.usableInstall); serr != nil {
		return fmt.Errorf("attribution: scan installs of %q: %w", e.UserID, serr)
	}
	if sc.err != nil {
		return sc.err
	}
	m, b := newOutput(pc, e.UserID)
	m.Value = AppendPurchase(b, sc.purchase)
	pc.Emit(m)
	return nil
}

// visitUsableInstall is the purchase scan's callback: it stops at the first
// usable install, or once no install below can be usable.
func (sc *scratch) visitUsableInstall(k, v []byte) bool {
	in, err := decodeInstall(k[sc.n:], v)
	if err != nil {
		sc.err = corrupt(k, err)
		return false
	}
	if usable(time.Unix(0, in.time), sc.now, sc.ret) {
		ids := sc.strings(in.eventID, in.campaign)
		sc.purchase.InstallID, sc.purchase.CampaignID = ids[0], ids[1]
		return false
	}
	return usable(time.Unix(0, in.maxTime), sc.now, sc.ret)
}
