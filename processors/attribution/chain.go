package attribution

import (
	"context"
	"encoding/binary"
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

// sequence is the shared deduplication (DESIGN §5 "Duplicates"): a record is
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

// ClickProcessor is the click stage: it stores each non-duplicate click in
// its user's bucket of click time.
type ClickProcessor struct{ cfg Config }

// Sequence deduplicates clicks.
func (p *ClickProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process appends the click (offset, time, arrival watermark max(S(o), t),
// event id, campaign, channel) to its user's bucket of click time, without
// decoding what the bucket holds. A bucket expires once the last time it
// can hold is unusable: bucket end + Lookback + Lateness. A click that no
// install can use any more (EvictionWatermark − time > Lookback+Lateness)
// is not stored.
func (p *ClickProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	win := p.cfg.clickWindow()
	if !usable(e.Time, pc.EvictionWatermark(), win) {
		return nil
	}
	st := pc.State()
	b := p.cfg.bucketOf(e.Time)
	key := clickKey(e.UserID, b)
	old, ok, err := st.Get(key)
	if err != nil {
		return fmt.Errorf("attribution: get %q: %w", key, err)
	}
	o := pc.Offset()
	buf := make([]byte, clickHeaderLen, max(len(old), clickHeaderLen)+64+len(e.EventID)+len(e.CampaignID)+len(e.Channel))
	if ok {
		if _, err := newClickReader(old); err != nil {
			return corrupt(key, err)
		}
		if lastClickOffset(old) == o {
			return nil // a repeated Process of this record: already stored
		}
		buf = append(buf[:0], old...)
	}
	buf[0] = stateVersion
	binary.BigEndian.PutUint64(buf[1:clickHeaderLen], uint64(o))
	buf = appendClick(buf, o, e.Time, maxTime(pc.StreamTime(), e.Time), e)
	end := time.Unix(0, (b+1)*int64(p.cfg.clickBucket())-1)
	return st.Set(key, buf, end.Add(win))
}

// InstallProcessor is the install stage: it attributes each non-duplicate
// install to a click, emits the install output and stores the install in
// its user's install list.
type InstallProcessor struct{ cfg Config }

// Sequence deduplicates installs.
func (p *InstallProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process applies DESIGN §5's install rule. Candidates are the user's
// stored clicks with time ≤ t, t − time ≤ Lookback, max(S(o), t) − time ≤
// Lookback+Lateness and (offset < o or arrival ≤ t+Lateness); the winner
// has the latest time, ties to the larger offset. The engine's gate
// guarantees every candidate is stored; stored clicks that are not
// candidates (e.g. at offsets > o that arrived too late) are ignored.
func (p *InstallProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	st := pc.State()
	o, t, s := pc.Offset(), e.Time, pc.StreamTime()
	now := maxTime(s, t)
	lateLimit := t.Add(p.cfg.Lateness)

	out := InstallOutput{EventID: e.EventID, UserID: e.UserID, Time: t}
	var best clickView
	found := false
	// Candidates have t − Lookback ≤ time ≤ t: only these buckets. Buckets
	// split event time, so scanning them newest first, the first bucket
	// with a candidate holds the winner (every click of an older bucket is
	// earlier than every click of it).
	for b := p.cfg.bucketOf(t); b >= p.cfg.bucketOf(t.Add(-p.cfg.Lookback)) && !found; b-- {
		ckey := clickKey(e.UserID, b)
		clicks, ok, err := st.Get(ckey)
		if err != nil {
			return fmt.Errorf("attribution: get %q: %w", ckey, err)
		}
		if !ok {
			continue
		}
		r, err := newClickReader(clicks)
		if err != nil {
			return corrupt(ckey, err)
		}
		for len(r.b) > 0 {
			c := r.click()
			if r.err != nil {
				return corrupt(ckey, r.err)
			}
			if c.time.After(t) || t.Sub(c.time) > p.cfg.Lookback ||
				!usable(c.time, now, p.cfg.clickWindow()) ||
				(c.offset > o && c.arrival.After(lateLimit)) {
				continue
			}
			if !found || c.time.After(best.time) || (c.time.Equal(best.time) && c.offset > best.offset) {
				best, found = c, true
			}
		}
	}
	if found {
		out.Attributed = true
		out.ClickID = string(best.eventID)
		out.CampaignID = string(best.campaign)
		out.Channel = string(best.channel)
		out.ClickTime = best.time
	}

	ikey := installKey(e.UserID)
	old, ok, err := st.Get(ikey)
	if err != nil {
		return fmt.Errorf("attribution: get %q: %w", ikey, err)
	}
	wm, ret := pc.EvictionWatermark(), p.cfg.InstallRetention
	buf := make([]byte, 1, len(old)+32+len(e.EventID)+len(out.CampaignID))
	buf[0] = stateVersion
	var latest time.Time
	if ok {
		r, err := newReader(old)
		if err != nil {
			return corrupt(ikey, err)
		}
		for len(r.b) > 0 {
			in := r.install()
			if r.err != nil {
				return corrupt(ikey, r.err)
			}
			if in.offset != o && usable(in.time, wm, ret) {
				buf = append(buf, in.raw...)
				latest = maxTime(latest, in.time)
			}
		}
	}
	if usable(t, wm, ret) {
		buf = appendInstall(buf, o, t, e.EventID, out.CampaignID)
		latest = maxTime(latest, t)
	}
	switch {
	case len(buf) > 1:
		err = st.Set(ikey, buf, latest.Add(ret))
	case ok:
		err = st.Delete(ikey)
	}
	if err != nil {
		return err
	}
	emit(pc, e.UserID, AppendInstall(make([]byte, 0, 256), out))
	return nil
}

// PurchaseProcessor is the purchase stage: it attributes each non-duplicate
// purchase to an install and emits the purchase output. It writes no state
// besides deduplication.
type PurchaseProcessor struct{ cfg Config }

// Sequence deduplicates purchases.
func (p *PurchaseProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return sequence(&p.cfg, pc, ev)
}

// Process applies DESIGN §5's purchase rule: among the user's stored
// installs at offsets < o with max(S(o), t) − time ≤ InstallRetention, the
// one at the largest offset (the latest in the log).
func (p *PurchaseProcessor) Process(_ context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	st := pc.State()
	o := pc.Offset()
	now := maxTime(pc.StreamTime(), e.Time)
	out := PurchaseOutput{EventID: e.EventID, UserID: e.UserID, Time: e.Time, Revenue: e.RevenueText, Currency: e.Currency}
	key := installKey(e.UserID)
	v, ok, err := st.Get(key)
	if err != nil {
		return fmt.Errorf("attribution: get %q: %w", key, err)
	}
	if ok {
		r, err := newReader(v)
		if err != nil {
			return corrupt(key, err)
		}
		var best installView
		found := false
		for len(r.b) > 0 {
			in := r.install()
			if r.err != nil {
				return corrupt(key, r.err)
			}
			if in.offset < o && usable(in.time, now, p.cfg.InstallRetention) && (!found || in.offset > best.offset) {
				best, found = in, true
			}
		}
		if found {
			out.InstallID = string(best.eventID)
			out.CampaignID = string(best.campaign)
		}
	}
	emit(pc, e.UserID, AppendPurchase(make([]byte, 0, 256), out))
	return nil
}
