package metricshttp

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
)

// Health is the /healthz handler of a running engine.
//
//   - 503 "not ready" until the consumer group is joined (Joined, or any
//     partition assigned);
//   - 503 "stalled" while some stage of some partition has lag (Lag > 0) and
//     its position has not moved for longer than StallTimeout (now −
//     LastProgress > StallTimeout); the body names every such
//     topic/partition/stage;
//   - 200 otherwise (also when the member is joined but owns no partition);
//     partitions whose state is being restored from the changelog are
//     listed as "restoring" with their progress (a restore is work, not a
//     stall: its stages have not started).
//
// LastProgress is refreshed at every commit interval, so a stall is seen
// between StallTimeout and StallTimeout plus one commit interval after the
// position stopped. Health is safe for concurrent use.
type Health struct {
	// Stats returns the engine's per-partition snapshot (chain.(*Chain).Stats).
	Stats func() []chain.PartitionStats
	// Joined reports whether the consumer group has been joined at least
	// once. nil: joined as soon as a partition is assigned.
	Joined func() bool
	// StallTimeout: how long a lagging stage may make no progress.
	StallTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Stall is one stage of one partition that makes no progress while it lags.
type Stall struct {
	Topic     string
	Partition int32
	Stage     string
	Position  int64
	Lag       int64
	Since     time.Duration // since the last progress
}

func (s Stall) String() string {
	return fmt.Sprintf("%s/%d stage %s: position %d, lag %d, no progress for %s",
		s.Topic, s.Partition, s.Stage, s.Position, s.Lag, s.Since.Round(time.Millisecond))
}

// Check returns the HTTP status and the body's text.
func (h *Health) Check() (status int, body string) {
	stats := h.Stats()
	if len(stats) == 0 && (h.Joined == nil || !h.Joined()) {
		return http.StatusServiceUnavailable, "not ready: the consumer group has not been joined yet\n"
	}
	stalls := h.Stalls(stats)
	if len(stalls) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "stalled: %d stage(s) lag with no progress for more than %s\n", len(stalls), h.StallTimeout)
		for _, s := range stalls {
			b.WriteString(s.String() + "\n")
		}
		return http.StatusServiceUnavailable, b.String()
	}
	if len(stats) == 0 {
		return http.StatusOK, "ok: joined, no partition assigned\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ok: %d partition(s) assigned, none stalled\n", len(stats))
	for _, p := range stats {
		if r := p.Restore; r.Restoring {
			fmt.Fprintf(&b, "restoring %s/%d: %s, changelog offset %d of [%d, %d), %d records (%d bytes) applied in %s\n",
				p.Topic, p.Partition, r.Phase, r.Position, r.From, r.To, r.Records, r.Bytes, r.Duration.Round(time.Millisecond))
		}
	}
	return http.StatusOK, b.String()
}

// Stalls returns the stalled stages of stats.
func (h *Health) Stalls(stats []chain.PartitionStats) []Stall {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	t := now()
	var out []Stall
	for _, p := range stats {
		for _, s := range p.Stages {
			if s.Lag <= 0 || s.LastProgress.IsZero() {
				continue
			}
			if since := t.Sub(s.LastProgress); since > h.StallTimeout {
				out = append(out, Stall{Topic: p.Topic, Partition: p.Partition, Stage: s.Name,
					Position: s.Position, Lag: s.Lag, Since: since})
			}
		}
	}
	return out
}

// ServeHTTP implements http.Handler.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	status, body := h.Check()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// Mux returns the handler of both endpoints: /metrics (reg) and /healthz (h).
func Mux(metricsHandler http.Handler, h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler)
	mux.Handle("GET /healthz", h)
	return mux
}
