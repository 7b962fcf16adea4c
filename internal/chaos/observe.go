package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kadmin"
)

// lagSample is one reading of the input topic's end offsets and the
// group's committed offsets, per partition and summed.
type lagSample struct {
	at        time.Time
	end       int64 // sum over partitions of the high watermark
	committed int64 // sum over partitions of the committed offset (none: 0)
	ends      []int64
	commits   []int64
}

func (s lagSample) lag() int64 { return s.end - s.committed }

// Recovery is judged with a window: the event-time gate holds each
// partition's newest records until a later record arrives (an install
// waits for a click with a later time, DESIGN.md "Mechanisms"), so a streaming input's
// lag is rarely exactly 0. A partition is caught up when every record
// written more than CatchUpWindow ago is committed; measured on this
// machine, that holds in >95% of the samples of an undisturbed run with the
// suite's pace (a burst every 500 ms, commits every 200 ms).
const (
	CatchUpWindow = 2 * time.Second
	// CatchUpHold is how long every partition must stay caught up for the
	// engine to count as recovered (one good reading can be luck).
	CatchUpHold = 2 * time.Second
)

// lagSampler reads, every interval, the input's high watermarks and the
// group's committed offsets (OffsetFetch), on a client with second-scale
// timeouts so a dead or paused broker delays a reading, not the suite. A
// reading that fails is skipped.
type lagSampler struct {
	brokers    []string
	topic      string
	group      string
	partitions int32
	interval   time.Duration

	mu      sync.Mutex
	samples []lagSample
	changed chan struct{} // closed and replaced at every new sample
	trace   io.Writer     // every sample as "seconds end committed lag", if set
	t0      time.Time
}

func newLagSampler(brokers []string, topic, group string, partitions int32, interval time.Duration) *lagSampler {
	return &lagSampler{brokers: brokers, topic: topic, group: group, partitions: partitions,
		interval: interval, changed: make(chan struct{})}
}

// samplerConfig is kadmin's probe configuration with two-second reads and
// one metadata retry.
func samplerConfig() *sarama.Config {
	sc := kadmin.ProbeConfig()
	sc.ClientID = "differential-chaos-lag"
	sc.Net.ReadTimeout = 2 * time.Second
	sc.Net.WriteTimeout = 2 * time.Second
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Retry.Backoff = 100 * time.Millisecond
	return sc
}

// run samples until ctx ends.
func (l *lagSampler) run(ctx context.Context) {
	var client sarama.Client
	defer func() {
		if client != nil {
			_ = client.Close()
		}
	}()
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	for {
		if client == nil {
			c, err := sarama.NewClient(l.brokers, samplerConfig())
			if err == nil {
				client = c
			}
		}
		if client != nil {
			s, err := l.read(client)
			if err == nil {
				l.add(s)
			} else if !client.Closed() {
				// A failed reading often means stale metadata or a dead
				// connection: start over with a fresh client next time.
				_ = client.Close()
				client = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// read reads the committed offsets first, then the end offsets: a record
// committed by the first read was written before the second, so the lag
// read is never below the truth, and 0 means everything written by the
// end of the reading was committed.
func (l *lagSampler) read(client sarama.Client) (lagSample, error) {
	s := lagSample{ends: make([]int64, l.partitions), commits: make([]int64, l.partitions)}
	if l.group != "" {
		if err := l.committed(client, s.commits); err != nil {
			return s, err
		}
	}
	for p := range l.partitions {
		end, err := client.GetOffset(l.topic, p, sarama.OffsetNewest)
		if err != nil {
			return s, err
		}
		s.ends[p] = end
		s.end += end
		s.committed += s.commits[p]
	}
	s.at = time.Now()
	return s, nil
}

// committed reads the group's committed offsets (OffsetFetch) into out
// (none: 0).
func (l *lagSampler) committed(client sarama.Client, out []int64) error {
	coord, err := client.Coordinator(l.group)
	if err != nil {
		return err
	}
	req := &sarama.OffsetFetchRequest{Version: 5, ConsumerGroup: l.group}
	for p := range l.partitions {
		req.AddPartition(l.topic, p)
	}
	resp, err := coord.FetchOffset(req)
	if err == nil && resp.Err != sarama.ErrNoError {
		err = resp.Err
	}
	if err != nil {
		_ = client.RefreshCoordinator(l.group)
		return err
	}
	for p := range l.partitions {
		b := resp.GetBlock(l.topic, p)
		if b == nil {
			return fmt.Errorf("offset fetch: no block for %s/%d", l.topic, p)
		}
		if b.Err != sarama.ErrNoError {
			return b.Err
		}
		out[p] = max(b.Offset, 0)
	}
	return nil
}

func (l *lagSampler) add(s lagSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.trace != nil {
		fmt.Fprintf(l.trace, "%.2f\t%d\t%d\t%d\n", s.at.Sub(l.t0).Seconds(), s.end, s.committed, s.lag())
	}
	l.samples = append(l.samples, s)
	close(l.changed)
	l.changed = make(chan struct{})
}

// latest returns the last sample and a channel closed at the next one.
func (l *lagSampler) latest() (lagSample, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return lagSample{}, false, l.changed
	}
	return l.samples[len(l.samples)-1], true, l.changed
}

// recovered returns when the engine had recovered from a fault at t0: the
// first reading, at least CatchUpWindow after t0, from which on for
// CatchUpHold every partition is caught up — it has committed a record
// written after t0, and every record written CatchUpWindow before the
// reading. ok=false if no reading qualifies (yet).
func (l *lagSampler) recovered(t0 time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.at(t0)
	if before == nil {
		return time.Time{}, false
	}
	var from *lagSample // start of the current caught-up stretch
	for i := range l.samples {
		s := &l.samples[i]
		if s.at.Before(t0.Add(CatchUpWindow)) {
			continue
		}
		if !caughtUp(s, before, l.at(s.at.Add(-CatchUpWindow))) {
			from = nil
			continue
		}
		if from == nil {
			from = s
		}
		if s.at.Sub(from.at) >= CatchUpHold {
			return from.at, true
		}
	}
	return time.Time{}, false
}

// caughtUp: in every partition s has committed past before's end and up to
// earlier's end.
func caughtUp(s, before, earlier *lagSample) bool {
	for p := range s.commits {
		if s.commits[p] <= before.ends[p] || s.commits[p] < earlier.ends[p] {
			return false
		}
	}
	return true
}

// at returns the last sample at or before t, nil if none; l.mu is held.
func (l *lagSampler) at(t time.Time) *lagSample {
	i := sort.Search(len(l.samples), func(i int) bool { return l.samples[i].at.After(t) })
	if i == 0 {
		return nil
	}
	return &l.samples[i-1]
}

// maxLag is the largest lag sampled in [from, to].
func (l *lagSampler) maxLag(from, to time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m int64
	for _, s := range l.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			m = max(m, s.lag())
		}
	}
	return m
}

// await blocks until cond holds for the latest sample, ctx ends, timeout
// passes, or abort is closed (then it returns abortErr()).
func (l *lagSampler) await(ctx context.Context, timeout time.Duration, what string, cond func(lagSample) bool,
	abort <-chan struct{}, abortErr func() error) error {
	deadline := time.After(timeout)
	for {
		s, ok, changed := l.latest()
		if ok && cond(s) {
			return nil
		}
		select {
		case <-changed:
		case <-abort:
			return fmt.Errorf("%s: %w", what, abortErr())
		case <-deadline:
			return fmt.Errorf("%s: not after %s (last reading: end offsets %d, committed %d)", what, timeout, s.end, s.committed)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// healthEvent is a change of what the engine's /healthz answered.
type healthEvent struct {
	at     time.Time
	status string // "200 ok", "503 stalled", "503 not ready", "unreachable"
	body   string // the body's first two lines (a stall names its first stage)
}

// healthWatcher polls the current engine's /healthz (and its /metrics for
// the idle-release counters) every interval and keeps the changes.
type healthWatcher struct {
	addr     func() string // the current engine's metrics address, "" if none
	interval time.Duration
	logf     func(string, ...any) // each change, if set
	client   http.Client

	mu           sync.Mutex
	events       []healthEvent
	idleReleases int64 // the most seen in one scrape
}

func newHealthWatcher(addr func() string, interval time.Duration) *healthWatcher {
	return &healthWatcher{addr: addr, interval: interval, client: http.Client{Timeout: 2 * time.Second}}
}

func (h *healthWatcher) run(ctx context.Context) {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		if addr := h.addr(); addr != "" {
			h.poll(ctx, addr)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *healthWatcher) poll(ctx context.Context, addr string) {
	status, body := h.get(ctx, "http://"+addr+"/healthz")
	h.record(status, body)
	if _, m := h.get(ctx, "http://"+addr+"/metrics"); m != "" {
		n := sumSeries(m, "differential_stage_idle_releases_total")
		h.mu.Lock()
		h.idleReleases = max(h.idleReleases, n)
		h.mu.Unlock()
	}
}

func (h *healthWatcher) get(ctx context.Context, url string) (status, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "unreachable", ""
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return "unreachable", ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return strconv.Itoa(resp.StatusCode), string(b)
}

func (h *healthWatcher) record(status, body string) {
	first, rest, _ := strings.Cut(body, "\n")
	word, _, _ := strings.Cut(first, ":")
	if second, _, _ := strings.Cut(rest, "\n"); second != "" {
		first += " / " + second
	}
	if status != "unreachable" {
		status += " " + word
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.events); n > 0 && h.events[n-1].status == status {
		return
	}
	h.events = append(h.events, healthEvent{at: time.Now(), status: status, body: first})
	if h.logf != nil {
		h.logf("/healthz: %s: %s", status, first)
	}
}

func (h *healthWatcher) snapshot() ([]healthEvent, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]healthEvent(nil), h.events...), h.idleReleases
}

// sumSeries sums the values of every sample of a metric in Prometheus text.
func sumSeries(text, name string) int64 {
	var sum int64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += int64(v)
		}
	}
	return sum
}
