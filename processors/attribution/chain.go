package attribution

import (
	"context"
	"fmt"
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
	stages := []chain.Stage{
		{Name: StageClick, Filter: typeFilter(TypeClick), Processor: &ClickProcessor{cfg: cfg}},
		{Name: StageInstall, Filter: typeFilter(TypeInstall), Processor: &InstallProcessor{cfg: cfg}, Gate: chain.GateKey},
		{Name: StagePurchase, Filter: typeFilter(TypePurchase), Processor: &PurchaseProcessor{cfg: cfg}, Gate: chain.GateKey},
	}
	if cfg.Velocity.Enabled() {
		vp, err := NewVelocityProcessor(cfg, o.alertsTopic)
		if err != nil {
			panic("attribution.Chain: " + err.Error()) // cfg was validated above
		}
		stages = append(stages[:1], append([]chain.Stage{
			{Name: StageVelocity, Filter: typeFilter(TypeClick), Processor: vp, Gate: chain.GateKey}}, stages[1:]...)...)
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
	return dedup(cfg, pc, e, seenKey(e.Type, e.EventID))
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

func emit(pc *chain.Context, user string, value []byte) {
	pc.Emit(chain.Message{
		Key:     []byte(user),
		Value:   value,
		Headers: []chain.Header{{Key: sourceHeaderKey, Value: SourceValue(pc.Partition(), pc.Offset())}},
	})
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
	key := clickKey(e.UserID, e.Time.UnixNano(), pc.Offset())
	return pc.State().Set(key, encodeClick(maxTime(pc.StreamTime(), e.Time), e), e.Time.Add(win))
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
// the record's horizon (chain.Context.Horizon: where the log shows the
// click stage idle after the install); the winner has the latest time,
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
	out := InstallOutput{EventID: e.EventID, UserID: e.UserID, Time: t}
	if err := p.attribute(st, o, pc.Horizon(), e, maxTime(s, t), &out); err != nil {
		return err
	}
	// A purchase uses installs at offsets below its own, so its S is at
	// least max(S(o), t): an install unusable there is never used.
	if ret := p.cfg.InstallRetention; usable(t, s, ret) {
		maxT, err := p.latestInstallTime(st, e.UserID, o)
		if err != nil {
			return err
		}
		key := installKey(e.UserID, o)
		if err := st.Set(key, encodeInstall(t, maxTime(maxT, t), e.EventID, out.CampaignID), t.Add(ret)); err != nil {
			return err
		}
	}
	emit(pc, e.UserID, AppendInstall(make([]byte, 0, 256), out))
	return nil
}

// attribute fills out's click fields with the winning click, if any, among
// the clicks below the horizon h.
func (p *InstallProcessor) attribute(st chain.State, o, h int64, e *Event, now time.Time, out *InstallOutput) error {
	t := e.Time
	from := maxTime(t.Add(-p.cfg.Lookback), now.Add(-p.cfg.clickWindow()))
	if from.After(t) {
		return nil // nothing can be usable
	}
	lo := appendUser(nil, ClickKeyPrefix, e.UserID)
	n := len(lo)
	lo = appendBE(lo, max(from.UnixNano(), 0))
	hi := appendBE(lo[:n:n], t.UnixNano()+1) // a copy: cap n
	lateLimit := t.Add(p.cfg.Lateness).UnixNano()
	var err error
	serr := st.ScanReverse(lo, hi, func(k, v []byte) bool {
		var c clickView
		if c, err = decodeClick(k[n:], v); err != nil {
			err = corrupt(k, err)
			return false
		}
		if c.offset > o && c.arrival > lateLimit {
			return true // arrived after the install's lateness limit
		}
		if c.offset >= h {
			return true // after the log showed the click stage idle
		}
		out.Attributed = true
		out.ClickID = string(c.eventID)
		out.CampaignID = string(c.campaign)
		out.Channel = string(c.channel)
		out.ClickTime = time.Unix(0, c.time).UTC()
		return false
	})
	if serr != nil {
		return fmt.Errorf("attribution: scan clicks of %q: %w", e.UserID, serr)
	}
	return err
}

// latestInstallTime returns the latest time among the user's stored
// installs at offsets below o (zero if none): the max time the latest of
// them carries.
func (p *InstallProcessor) latestInstallTime(st chain.State, user string, o int64) (time.Time, error) {
	lo := appendUser(nil, InstallKeyPrefix, user)
	n := len(lo)
	hi := appendBE(lo[:n:n], o)
	var latest time.Time
	var err error
	serr := st.ScanReverse(lo, hi, func(k, v []byte) bool {
		var in installView
		if in, err = decodeInstall(k[n:], v); err != nil {
			err = corrupt(k, err)
		} else {
			latest = time.Unix(0, in.maxTime)
		}
		return false
	})
	if serr != nil {
		return time.Time{}, fmt.Errorf("attribution: scan installs of %q: %w", user, serr)
	}
	return latest, err
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
	now := maxTime(pc.StreamTime(), e.Time)
	ret := p.cfg.InstallRetention
	out := PurchaseOutput{EventID: e.EventID, UserID: e.UserID, Time: e.Time, Revenue: e.RevenueText, Currency: e.Currency}
	lo := appendUser(nil, InstallKeyPrefix, e.UserID)
	n := len(lo)
	hi := appendBE(lo[:n:n], o)
	serr := pc.State().ScanReverse(lo, hi, func(k, v []byte) bool {
		var in installView
		if in, err = decodeInstall(k[n:], v); err != nil {
			err = corrupt(k, err)
			return false
		}
		if usable(time.Unix(0, in.time), now, ret) {
			out.InstallID = string(in.eventID)
			out.CampaignID = string(in.campaign)
			return false
		}
		return usable(time.Unix(0, in.maxTime), now, ret)
	})
	if serr != nil {
		return fmt.Errorf("attribution: scan installs of %q: %w", e.UserID, serr)
	}
	if err != nil {
		return err
	}
	emit(pc, e.UserID, AppendPurchase(make([]byte, 0, 256), out))
	return nil
}
