package metricshttp

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultWedgeTimeout is how long /livez waits for the engine's Stats
// before it calls the engine wedged.
const DefaultWedgeTimeout = 10 * time.Second

// liveWait is the longest a /livez request waits for the engine's Stats;
// a call that takes longer is waited for by later requests, up to the
// wedge timeout, so that no probe waits long.
const liveWait = 500 * time.Millisecond

// Live is the liveness check (/livez): whether the process still works,
// whatever the brokers do. It answers
//
//   - 503 "exited" once Health.Running reports false (the engine returned;
//     the process is stopping);
//   - 503 "wedged" once a call of the engine's Stats has not returned for
//     Health.WedgeTimeout (a partition's or stage's lock held for ever: the
//     engine cannot make progress, and only a restart ends that). One call
//     at a time: a request waits for the call in progress (at most
//     liveWait) instead of starting another, so a wedged engine does not
//     pile up goroutines;
//   - 200 otherwise: a stalled stage, an unreachable leader or group
//     coordinator, a restore, or no partition at all is no reason to
//     restart the process (a broker outage would otherwise restart every
//     member), which is why liveness does not look at them.
func (h *Health) Live() (status int, body string) {
	if h.Running != nil && !h.Running() {
		return http.StatusServiceUnavailable, "exited: the engine has stopped\n"
	}
	timeout := h.WedgeTimeout
	if timeout <= 0 {
		timeout = DefaultWedgeTimeout
	}
	h.liveMu.Lock()
	done := h.livePending
	if done == nil {
		done = make(chan struct{})
		h.livePending, h.liveStarted = done, h.now()
		go func() {
			n := len(h.Stats())
			h.liveMu.Lock()
			h.livePending, h.liveN = nil, n
			h.liveMu.Unlock()
			close(done)
		}()
	}
	started := h.liveStarted
	h.liveMu.Unlock()
	t := time.NewTimer(liveWait)
	defer t.Stop()
	select {
	case <-done:
		h.liveMu.Lock()
		n := h.liveN
		h.liveMu.Unlock()
		return http.StatusOK, fmt.Sprintf("ok: the engine answers (%d partition(s) assigned)\n", n)
	case <-t.C:
	}
	if waited := h.now().Sub(started); waited >= timeout {
		return http.StatusServiceUnavailable, fmt.Sprintf("wedged: the engine's stats have not answered for %s\n",
			waited.Round(time.Millisecond))
	}
	return http.StatusOK, "ok: the engine's stats are slow to answer\n"
}

// Ready is the readiness check (/readyz): whether the member does its
// share of the work now. 503 with the reasons, one a line, unless the
// consumer group has been joined, at least one partition is assigned, no
// partition's state is being restored, and nothing is stalled (the rules
// of /healthz); 200 otherwise.
func (h *Health) Ready() (status int, body string) {
	stats := h.Stats()
	var reasons []string
	switch {
	case len(stats) == 0 && (h.Joined == nil || !h.Joined()):
		reasons = append(reasons, "not ready: the consumer group has not been joined yet")
	case len(stats) == 0:
		reasons = append(reasons, "not ready: no partition assigned")
	}
	for _, p := range stats {
		if r := p.Restore; r.Restoring {
			reasons = append(reasons, fmt.Sprintf("restoring %s/%d: %s, changelog offset %d of [%d, %d)",
				p.Topic, p.Partition, r.Phase, r.Position, r.From, r.To))
		}
	}
	for _, s := range h.Stalls(stats) {
		reasons = append(reasons, "stalled "+s.String())
	}
	if len(reasons) > 0 {
		return http.StatusServiceUnavailable, strings.Join(reasons, "\n") + "\n"
	}
	return http.StatusOK, fmt.Sprintf("ready: %d partition(s) assigned, none restoring or stalled\n", len(stats))
}

func (h *Health) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// probeState is Live's check in progress.
type probeState struct {
	liveMu      sync.Mutex
	livePending chan struct{} // the Stats call not yet returned, nil: none
	liveStarted time.Time
	liveN       int // partitions the last call returned
}

func serveProbe(check func() (int, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		status, body := check()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}
