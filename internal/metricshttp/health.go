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
//   - 503 "stalled" while, for longer than StallTimeout, (a) some stage of
//     some partition has lag (Lag > 0) and its position has not moved (now −
//     LastProgress), or (b) a partition's leader has not answered the
//     engine (now − LeaderContact: a partition whose leader is gone fetches
//     nothing, so its lag alone would look like zero), or (c) a partition's
//     commit has not been acknowledged by the group coordinator (now −
//     CommitPendingSince: the coordinator is unreachable or paused); the
//     body names every such topic/partition (and stage). An idle partition
//     is not stalled: its leader answers (the Kafka adapter probes it every
//     second), it has no lag, and it has nothing new to commit;
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
	// Running reports whether the engine still runs (/livez); nil: always.
	Running func() bool
	// WedgeTimeout: how long /livez waits for Stats (0:
	// DefaultWedgeTimeout).
	WedgeTimeout time.Duration

	probeState
}

// What a Stall is.
const (
	StallLag    = "lag"    // a stage lags and its position does not move
	StallLeader = "leader" // the partition's leader does not answer
	StallCommit = "commit" // the group coordinator does not acknowledge a commit
)

// Stall is one partition (and for StallLag one stage) that makes no
// progress.
type Stall struct {
	Kind      string // StallLag, StallLeader or StallCommit
	Topic     string
	Partition int32
	Stage     string        // StallLag only
	Position  int64         // StallLag only
	Lag       int64         // StallLag only
	Since     time.Duration // since the last progress, answer or acknowledged commit
}

func (s Stall) String() string {
	d := s.Since.Round(time.Millisecond)
	switch s.Kind {
	case StallLeader:
		return fmt.Sprintf("%s/%d: no answer from the partition's leader for %s", s.Topic, s.Partition, d)
	case StallCommit:
		return fmt.Sprintf("%s/%d: commit not acknowledged by the group coordinator for %s", s.Topic, s.Partition, d)
	}
	return fmt.Sprintf("%s/%d stage %s: position %d, lag %d, no progress for %s",
		s.Topic, s.Partition, s.Stage, s.Position, s.Lag, d)
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
		fmt.Fprintf(&b, "stalled: %d stage(s) or partition(s) with no progress for more than %s\n", len(stalls), h.StallTimeout)
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
	t := h.now()
	var out []Stall
	stale := func(at time.Time) (time.Duration, bool) {
		if at.IsZero() {
			return 0, false
		}
		since := t.Sub(at)
		return since, since > h.StallTimeout
	}
	for _, p := range stats {
		if since, ok := stale(p.LeaderContact); ok {
			out = append(out, Stall{Kind: StallLeader, Topic: p.Topic, Partition: p.Partition, Since: since})
		}
		if since, ok := stale(p.CommitPendingSince); ok {
			out = append(out, Stall{Kind: StallCommit, Topic: p.Topic, Partition: p.Partition, Since: since})
		}
		for _, s := range p.Stages {
			if s.Lag <= 0 {
				continue
			}
			if since, ok := stale(s.LastProgress); ok {
				out = append(out, Stall{Kind: StallLag, Topic: p.Topic, Partition: p.Partition, Stage: s.Name,
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

// Mux returns the handler of /metrics (metricsHandler) and of the probes:
// /healthz (h), /livez (h.Live) and /readyz (h.Ready).
func Mux(metricsHandler http.Handler, h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler)
	mux.Handle("GET /healthz", h)
	mux.Handle("GET /livez", serveProbe(h.Live))
	mux.Handle("GET /readyz", serveProbe(h.Ready))
	return mux
}
