package statequery

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

// Path is the route's pattern on the HTTP server's mux.
const Path = "/state/{key}"

// DefaultRetryAfter is the Retry-After of a 503.
const DefaultRetryAfter = 2 * time.Second

// Snapshot is one partition's state as a query reads it
// (store.PartitionSnapshot).
type Snapshot interface {
	attribution.StateReader
	Close() error
}

// Config is what a Handler reads.
type Config struct {
	// Topic is the input topic.
	Topic string
	// Partitions returns the input topic's partition count.
	Partitions func() (int32, error)
	// Stats is the chain's per-partition snapshot (chain.(*Chain).Stats):
	// the partitions this member runs, their restores and stages.
	Stats func() []chain.PartitionStats
	// Open takes a snapshot of a partition's persisted state.
	Open func(partition int32) (Snapshot, error)
	// Rules are the attribution rules the chain runs with.
	Rules attribution.Config
	// Owners maps the input's partitions to their members' advertised
	// HTTP addresses (kafka.GroupOwners); nil: a single member, whose
	// partitions it does not run are answered 503.
	Owners func(ctx context.Context) (map[int32]string, error)
	// Self is this member's advertised address: an owner at Self that
	// does not run the partition is mid-rebalance (503, not a redirect to
	// itself).
	Self string
	// RetryAfter is the Retry-After of a 503 (0: DefaultRetryAfter).
	RetryAfter time.Duration
	// Logger receives the errors a 500 answers. nil: discard.
	Logger *slog.Logger
}

// Partition is the partition of key in a topic of n partitions, as sarama's
// default (hash) partitioner places it: FNV-1a 32 of the key, as int32,
// modulo n, negated if negative.
func Partition(key []byte, n int32) int32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	p := int32(h.Sum32()) % n
	if p < 0 {
		p = -p
	}
	return p
}

// Handler serves Path with c.
func Handler(c Config) http.Handler {
	if c.RetryAfter <= 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(c.serve)
}

// Answer is the JSON of a 200.
type Answer struct {
	Key       string `json:"key"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the smallest of the stages' positions: every record of the
	// partition below it is in every part of the answer.
	Offset   int64                  `json:"offset"`
	Stages   map[string]StageAnswer `json:"stages"`
	Clicks   []Click                `json:"clicks"`
	Installs []Install              `json:"installs"`
	Velocity *Velocity              `json:"velocity,omitempty"`
}

// Velocity is the key's click count over the velocity window.
type Velocity struct {
	Window    string `json:"window"`
	Count     int64  `json:"count"`
	Threshold int64  `json:"threshold"`
}

// StageAnswer is the position a part of the answer was read at.
type StageAnswer struct {
	Offset    int64      `json:"offset"`
	Watermark *time.Time `json:"watermark,omitempty"`
}

// Click is a stored click.
type Click struct {
	EventID    string    `json:"event_id"`
	Offset     int64     `json:"offset"`
	Time       time.Time `json:"time"`
	CampaignID string    `json:"campaign_id"`
	Channel    string    `json:"channel,omitempty"`
}

// Install is a stored install (CampaignID empty: organic).
type Install struct {
	EventID    string    `json:"event_id"`
	Offset     int64     `json:"offset"`
	Time       time.Time `json:"time"`
	CampaignID string    `json:"campaign_id,omitempty"`
}

// ready is the partition's run as the checks see it: running with its
// stages started and no restore under way (restore is the restore's start,
// to tell a new one from the last).
type ready struct {
	ok, running bool
	why         string
	restore     time.Time
}

func (c *Config) check(p int32) ready {
	for _, ps := range c.Stats() {
		if ps.Topic != c.Topic || ps.Partition != p {
			continue
		}
		r := ready{running: true, restore: ps.Restore.Started}
		switch {
		case ps.Restore.Restoring:
			r.why = fmt.Sprintf("partition %d's state is being restored from the changelog (%s, %d of %d)",
				p, ps.Restore.Phase, ps.Restore.Position-ps.Restore.From, ps.Restore.To-ps.Restore.From)
		case len(ps.Stages) == 0:
			r.why = fmt.Sprintf("partition %d is assigned and its stages have not started", p)
		default:
			r.ok = true
		}
		return r
	}
	return ready{why: fmt.Sprintf("partition %d is not running on this member", p)}
}

func (c *Config) serve(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" {
		http.Error(w, "the key is missing: GET /state/{key}", http.StatusBadRequest)
		return
	}
	n, err := c.Partitions()
	if err != nil || n <= 0 {
		c.unavailable(w, fmt.Sprintf("the partition count of %s is not known: %v", c.Topic, err))
		return
	}
	p := Partition([]byte(key), n)
	before := c.check(p)
	if !before.running {
		c.elsewhere(w, r, key, p)
		return
	}
	if !before.ok {
		c.unavailable(w, before.why)
		return
	}
	snap, err := c.Open(p)
	if err != nil {
		c.fail(w, "open a snapshot of partition "+strconv.Itoa(int(p)), err)
		return
	}
	defer func() { _ = snap.Close() }()
	if after := c.check(p); !after.ok || !after.restore.Equal(before.restore) {
		why := after.why
		if why == "" {
			why = fmt.Sprintf("partition %d was restored again while it was read", p)
		}
		c.unavailable(w, why)
		return
	}
	s, err := attribution.QueryUser(snap, c.Rules, key)
	if err != nil {
		c.fail(w, "read the state of "+strconv.Quote(key), err)
		return
	}
	a := Answer{Key: key, Topic: c.Topic, Partition: p, Offset: s.Offset(), Stages: map[string]StageAnswer{},
		Clicks: []Click{}, Installs: []Install{}}
	if v := s.Velocity; v != nil {
		a.Velocity = &Velocity{Window: v.Window, Count: v.Count, Threshold: v.Threshold}
	}
	for name, pos := range s.Stages {
		sa := StageAnswer{Offset: pos.Offset}
		if !pos.Watermark.IsZero() {
			wm := pos.Watermark
			sa.Watermark = &wm
		}
		a.Stages[name] = sa
	}
	for _, cl := range s.Clicks {
		a.Clicks = append(a.Clicks, Click{EventID: cl.EventID, Offset: cl.Offset, Time: cl.Time, CampaignID: cl.CampaignID, Channel: cl.Channel})
	}
	for _, in := range s.Installs {
		a.Installs = append(a.Installs, Install{EventID: in.EventID, Offset: in.Offset, Time: in.Time, CampaignID: in.CampaignID})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(a)
}

// elsewhere answers a key whose partition this member does not run: 307 to
// its owner's advertised address, or 503 when no owner is known.
func (c *Config) elsewhere(w http.ResponseWriter, r *http.Request, key string, p int32) {
	if c.Owners == nil {
		c.unavailable(w, fmt.Sprintf("partition %d is not running on this member (is it assigned yet?)", p))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	owners, err := c.Owners(ctx)
	if err != nil {
		c.unavailable(w, fmt.Sprintf("partition %d is not running on this member, and the group's members are not known: %v", p, err))
		return
	}
	addr, ok := owners[p]
	switch {
	case !ok:
		c.unavailable(w, fmt.Sprintf("partition %d is not assigned to any member (the group is rebalancing)", p))
		return
	case addr == "":
		c.unavailable(w, fmt.Sprintf("partition %d's member advertises no HTTP address (--advertised-http-addr)", p))
		return
	case addr == c.Self:
		c.unavailable(w, fmt.Sprintf("partition %d is assigned to this member and not running yet", p))
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	loc := (&url.URL{Scheme: scheme, Host: addr, Path: "/state/" + key}).String()
	w.Header().Set("Location", loc)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTemporaryRedirect)
	_, _ = fmt.Fprintf(w, "partition %d of %s is owned by the member at %s: %s\n", p, c.Topic, addr, loc)
}

func (c *Config) unavailable(w http.ResponseWriter, why string) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(int((c.RetryAfter+time.Second-1)/time.Second)))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintln(w, "unavailable: "+why)
}

func (c *Config) fail(w http.ResponseWriter, what string, err error) {
	c.Logger.Error("state query: "+what, "err", err)
	http.Error(w, what+": "+err.Error(), http.StatusInternalServerError)
}
