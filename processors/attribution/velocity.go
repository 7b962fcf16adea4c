package attribution

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/window"
)

// StageVelocity is the name of the velocity stage (Config.Velocity).
const StageVelocity = "velocity"

// AlertKind is the "kind" of a velocity alert.
const AlertKind = "click_velocity"

// State keys of the velocity stage (its only writer).
const (
	// VelocityKeyPrefix starts the velocity stage's own keys: VelocityKeyPrefix
	// + "d/" + event_id is its deduplication of clicks (like SeenKeyPrefix's
	// for the click stage), VelocityKeyPrefix + "a/" + user_id the user's
	// last alert. The click counts are the processors/window counter named
	// StageVelocity: window.KeyPrefix + "velocity/" + user_id.
	VelocityKeyPrefix = "v/"
)

func velocitySeenKey(id string) []byte { return append([]byte(VelocityKeyPrefix+"d/"), id...) }
func alertKey(user string) []byte      { return append([]byte(VelocityKeyPrefix+"a/"), user...) }

// AlertOutput is the content of a velocity alert.
type AlertOutput struct {
	UserID string
	// Window is the counting window, formatted by window.FormatDuration ("1h").
	Window string
	// Count is the user's click count at the click that raised the alert.
	Count int64
	// Time and EventID are that click's.
	Time    time.Time
	EventID string
}

// AppendAlert appends the JSON of a to dst:
//
//	{"kind":"click_velocity","user_id":…,"window":"1h","count":21,"time":…,"event_id":…}
func AppendAlert(dst []byte, a AlertOutput) []byte {
	dst = append(dst, `{"kind":"`+AlertKind+`","user_id":`...)
	dst = AppendString(dst, a.UserID)
	dst = append(dst, `,"window":`...)
	dst = AppendString(dst, a.Window)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, a.Count, 10)
	dst = append(dst, `,"time":`...)
	dst = AppendTime(dst, a.Time)
	dst = append(dst, `,"event_id":`...)
	dst = AppendString(dst, a.EventID)
	return append(dst, '}')
}

// VelocityProcessor is the velocity stage: it counts each user's
// non-duplicate valid clicks over the trailing Velocity.Window of event
// time and emits an alert when the count exceeds Velocity.Threshold.
//
// The rule, for a non-duplicate valid click c of user u at offset o, time t,
// with S = S(o) and arrival watermark A(c) = max(S, t) (DESIGN.md "Attribution rules"):
//
//   - count(c) is the processors/window count with Window, Bucket and
//     Lateness of Velocity (c is not counted, and raises nothing, when
//     S − t > Lateness);
//   - c raises an alert when count(c) > Threshold and no click of u at an
//     offset < o raised one with A(c) − A(that click) < Window: at most one
//     alert per user per Window of stream time, raised by the click that
//     first exceeds the threshold in it.
//
// Alerts go to the stage's alerts topic (AlertsTopic; the chain's output
// topic by default), key = user_id, value AppendAlert, with the
// SourceHeader of the click. Duplicates are decided by the stage's own
// Sequence with the rule every stage uses (DESIGN.md "Attribution rules"), on its own keys.
type VelocityProcessor struct {
	cfg     Config
	topic   string
	window  string
	counter *window.Counter
	alerts  atomic.Int64
}

// NewVelocityProcessor returns the velocity stage's processor for cfg
// (cfg.Velocity enabled), emitting to topic ("" = the output topic).
func NewVelocityProcessor(cfg Config, topic string) (*VelocityProcessor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Velocity.Enabled() {
		return nil, fmt.Errorf("attribution: the velocity stage needs Velocity.Window > 0")
	}
	v := cfg.Velocity
	c, err := window.New(window.Config{Name: StageVelocity, Window: v.Window, Bucket: v.Bucket, Lateness: v.Lateness})
	if err != nil {
		return nil, err
	}
	return &VelocityProcessor{cfg: cfg, topic: topic, window: window.FormatDuration(v.Window), counter: c}, nil
}

// VelocityStats are the velocity stage's metrics in this process.
type VelocityStats struct {
	// Alerts is the number of alerts emitted (a retried record's alert
	// counts once).
	Alerts int64
	// Counter is the click counter's (keys tracked, state size, ...).
	Counter window.Stats
}

// Stats returns the stage's metrics.
func (p *VelocityProcessor) Stats() VelocityStats {
	return VelocityStats{Alerts: p.alerts.Load(), Counter: p.counter.Stats()}
}

// RegisterMetrics registers the gauge "differential.velocity.alerts" and
// the counter's "differential.window.velocity.*" gauges (see
// window.Counter.RegisterMetrics) in r, and returns the function that
// unregisters them.
func (p *VelocityProcessor) RegisterMetrics(r metrics.Registry) (unregister func()) {
	const name = "differential.velocity.alerts"
	_ = r.Register(name, metrics.NewFunctionalGauge(p.alerts.Load))
	unreg := p.counter.RegisterMetrics(r)
	return func() {
		r.Unregister(name)
		unreg()
	}
}

// Sequence deduplicates clicks on the stage's own keys.
func (p *VelocityProcessor) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	e, err := payload(ev)
	if err != nil {
		return false, err
	}
	return dedup(&p.cfg, pc, e, velocitySeenKey(e.EventID))
}

// Process counts the click and raises the alert the rule prescribes.
func (p *VelocityProcessor) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	e, err := payload(ev)
	if err != nil {
		return err
	}
	n, err := p.counter.Add(ctx, pc, e.UserID, e.Time)
	if err != nil || n <= p.cfg.Velocity.Threshold {
		return err
	}
	st, o := pc.State(), pc.Offset()
	arrival := maxTime(pc.StreamTime(), e.Time)
	key := alertKey(e.UserID)
	v, ok, err := st.Get(key)
	if err != nil {
		return fmt.Errorf("attribution: get %q: %w", key, err)
	}
	repeat := false
	if ok {
		last, off, err := decodeAlert(v)
		if err != nil {
			return corrupt(key, err)
		}
		switch {
		case off == o:
			repeat = true // a retried Process of the click that raised it
		case arrival.Sub(last) < p.cfg.Velocity.Window:
			return nil
		}
	}
	if !repeat {
		// Usable while a later click can have A − arrival < Window: every
		// later click has A ≥ S, so up to arrival + Window − 1ns.
		if err := st.Set(key, encodeAlert(arrival, o), arrival.Add(p.cfg.Velocity.Window-1)); err != nil {
			return fmt.Errorf("attribution: set %q: %w", key, err)
		}
		p.alerts.Add(1)
	}
	pc.Emit(chain.Message{
		Topic: p.topic,
		Key:   []byte(e.UserID),
		Value: AppendAlert(make([]byte, 0, 160), AlertOutput{UserID: e.UserID, Window: p.window, Count: n,
			Time: e.Time, EventID: e.EventID}),
		Headers: []chain.Header{{Key: sourceHeaderKey, Value: SourceValue(pc.Partition(), pc.Offset())}},
	})
	return nil
}

// Alert state: version, arrival watermark (varint unix ns), offset (varint).
func encodeAlert(arrival time.Time, off int64) []byte {
	b := appendTimeNS([]byte{alertVersion}, arrival)
	return appendVarint(b, off)
}

func decodeAlert(v []byte) (time.Time, int64, error) {
	r, err := newReader(v, alertVersion)
	if err != nil {
		return time.Time{}, 0, err
	}
	t, off := time.Unix(0, r.varint()).UTC(), r.varint()
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return t, off, r.err
}
