package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
)

// The standby metrics, in Config.Registry: StandbyMetricPrefix + "warm"
// (gauge: partitions held warm), + "records" (counter: changelog records
// applied), + "errors" (counter: failed catch-ups).
const StandbyMetricPrefix = "differential.standby."

// DefaultStandbyInterval is how often a member brings its standbys up to
// the group's latest commit (Config.StandbyInterval).
const DefaultStandbyInterval = time.Second

// standbys keeps the member's warm copies of partitions it does not own
// (Config.StandbyReplicas). Every interval it describes the group, works
// out which partitions this member stands by for (standbyPlacement), fetches
// their committed offsets and metadata, and catches each up
// (chain.Standby.CatchUp). The partitions whose last catch-up succeeded
// are the member's warm set, which its subscriptions advertise
// (PreferWarm) so that the group's leader gives a moving partition to a
// member holding it warm.
type standbys struct {
	r        *runner
	replicas int
	interval time.Duration
	log      *slog.Logger

	// open and failed are touched by the loop's goroutine only; failed
	// holds the last error of a partition's catch-up, so that one that
	// fails every round is logged as a warning once, not every second.
	open   map[int32]*chain.Standby
	failed map[int32]string

	warmGauge         metrics.Gauge
	records, failures metrics.Counter

	mu   sync.Mutex
	warm []int32 // sorted
}

func newStandbys(r *runner) *standbys {
	iv := r.cfg.StandbyInterval
	if iv <= 0 {
		iv = DefaultStandbyInterval
	}
	reg := r.cfg.Registry
	if reg == nil {
		reg = metrics.NewRegistry() // counted, not exported
	}
	return &standbys{r: r, replicas: r.cfg.StandbyReplicas, interval: iv, log: r.log.With("standby", true),
		open:      map[int32]*chain.Standby{},
		failed:    map[int32]string{},
		warmGauge: metrics.GetOrRegisterGauge(StandbyMetricPrefix+"warm", reg),
		records:   metrics.GetOrRegisterCounter(StandbyMetricPrefix+"records", reg),
		failures:  metrics.GetOrRegisterCounter(StandbyMetricPrefix+"errors", reg),
	}
}

// warmSet is what the member advertises: the partitions it holds warm.
func (s *standbys) warmSet() []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.warm)
}

// run keeps the standbys until ctx ends, then closes them (their local
// state stays for a later assignment or standby).
func (s *standbys) run(ctx context.Context) {
	defer s.closeAll()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *standbys) closeAll() {
	for p, sb := range s.open {
		s.close(p, sb)
	}
	s.setWarm(nil)
}

func (s *standbys) close(p int32, sb *chain.Standby) {
	if err := sb.Close(); err != nil {
		s.log.Warn("closing a standby", "partition", p, "err", err)
	}
	delete(s.open, p)
	delete(s.failed, p)
}

func (s *standbys) setWarm(ps []int32) {
	slices.Sort(ps)
	s.mu.Lock()
	s.warm = ps
	s.mu.Unlock()
	s.warmGauge.Update(int64(len(ps)))
}

// round is one pass: placement, then a catch-up of every standby. Errors
// are logged and the next round tries again; a standby only makes a
// later restore shorter, so nothing here may fail the Run.
func (s *standbys) round(ctx context.Context) {
	r := s.r
	r.mu.Lock()
	me := r.memberID
	r.mu.Unlock()
	if me == "" || r.ch.Starting() {
		// Not in a session yet, or the member's own partitions are
		// restoring: they come first.
		return
	}
	rctx, cancel := context.WithTimeout(ctx, max(s.interval*5, 10*time.Second))
	defer cancel()
	g, err := describeGroup(rctx, r.offsets, r.cfg.Group)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("describing the group for the standbys", "err", err)
		}
		return
	}
	if g.State != "Stable" {
		// Rebalancing: the assignment is not known; keep what is held.
		return
	}
	parts, err := r.offsets.client.Partitions(r.cfg.Topic)
	if err != nil {
		s.log.Debug("partitions of the input for the standbys", "err", err)
		return
	}
	mine := standbyPlacement(g, r.cfg.Topic, parts, s.replicas)[me]
	want := map[int32]bool{}
	for _, p := range mine {
		want[p] = true
	}
	for p, sb := range s.open {
		if !want[p] {
			s.log.Info("no longer a standby of the partition", "partition", p)
			s.close(p, sb)
		}
	}
	if len(mine) == 0 {
		s.setWarm(nil)
		return
	}
	offs, err := r.offsets.fetchOffsets(rctx, r.cfg.Topic, mine, false)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("committed offsets for the standbys", "err", err)
		}
		s.setWarm(s.heldWarm())
		return
	}
	var warm []int32
	for _, p := range mine {
		sb := s.open[p]
		if sb == nil {
			if sb, err = r.ch.OpenStandby(r.cfg.Topic, p); err != nil {
				if !errors.Is(err, chain.ErrPartitionRunning) {
					s.log.Warn("opening a standby", "partition", p, "err", err)
				}
				continue
			}
			s.open[p] = sb
			s.log.Info("standing by for the partition", "partition", p)
		}
		c := offs[p]
		// The run's context, not the round's: a first catch-up of a large
		// state may take minutes, and its batches count as they land.
		st, err := sb.CatchUp(ctx, c.offset, c.metadata)
		s.records.Inc(st.Records)
		switch {
		case errors.Is(err, chain.ErrStandbyClosed):
			delete(s.open, p) // the partition runs here now
			continue
		case err != nil:
			if ctx.Err() == nil {
				s.failures.Inc(1)
				level := slog.LevelWarn
				if s.failed[p] == err.Error() {
					level = slog.LevelDebug
				}
				s.failed[p] = err.Error()
				s.log.Log(ctx, level, "catching a standby up", "partition", p, "err", err)
			}
			continue
		}
		delete(s.failed, p) // and "standby warm" below says it is back
		switch {
		case !slices.Contains(s.warm, p):
			s.log.Info("standby warm", "partition", p, "changelog_offset", st.Committed, "from", st.From,
				"records", st.Records, "rebuilt", st.Rebuilt, "seconds", st.Duration.Seconds())
		case st.Records > 0 || st.Rebuilt:
			s.log.Debug("standby caught up", "partition", p, "from", st.From, "to", st.Committed,
				"records", st.Records, "rebuilt", st.Rebuilt, "seconds", st.Duration.Seconds())
		}
		if f := r.cfg.Hooks.Standby; f != nil {
			f(r.cfg.Topic, p, st)
		}
		warm = append(warm, p)
	}
	s.setWarm(warm)
}

// heldWarm is the warm set restricted to the standbys still open.
func (s *standbys) heldWarm() []int32 {
	var out []int32
	for _, p := range s.warmSet() {
		if s.open[p] != nil {
			out = append(out, p)
		}
	}
	return out
}

// groupView is the part of a group's description the placement needs.
type groupView struct {
	State   string
	Members []groupMember
}

type groupMember struct {
	ID    string // member id
	Key   string // instance id, or the member id without one
	Addr  string // advertised HTTP address, "" for none (Advertise)
	Owned map[string][]int32
}

// groupMembers reads a group description's members: ids, advertised
// address and assignment (none while the group rebalances).
func groupMembers(d *sarama.GroupDescription) []groupMember {
	out := make([]groupMember, 0, len(d.Members))
	for _, m := range d.Members {
		gm := groupMember{ID: m.MemberId, Key: m.MemberId}
		if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
			gm.Key = *m.GroupInstanceId
		}
		if meta, err := m.GetMemberMetadata(); err == nil && meta != nil {
			gm.Addr = advertisedAddr(meta.UserData)
		}
		if a, err := m.GetMemberAssignment(); err == nil && a != nil {
			gm.Owned = a.Topics
		}
		out = append(out, gm)
	}
	return out
}

// describeGroup describes the group on its coordinator (DescribeGroups v4
// and later name each member's instance id).
func describeGroup(ctx context.Context, o *offsets, group string) (groupView, error) {
	var g groupView
	err := o.retry(ctx, func(coord *sarama.Broker) error {
		req := &sarama.DescribeGroupsRequest{Groups: []string{group}}
		if o.client.Config().Version.IsAtLeast(sarama.V2_4_0_0) {
			req.Version = 4
		}
		resp, err := coord.DescribeGroups(req)
		if err != nil {
			_ = coord.Close()
			return err
		}
		if len(resp.Groups) != 1 {
			return fmt.Errorf("describe group %s: %d groups in the answer", group, len(resp.Groups))
		}
		d := resp.Groups[0]
		if d.Err != sarama.ErrNoError {
			return d.Err
		}
		g = groupView{State: d.State, Members: groupMembers(d)}
		return nil
	})
	return g, err
}

// standbyPlacement returns, for every member id, the partitions of topic
// it stands by for: for each partition, the replicas members other than
// its owner that rank highest by a hash of (member key, topic, partition)
// (rendezvous hashing). A member's key is its instance id when it has one,
// so a restarted static member stands by for the same partitions as
// before and its local state is still the warm copy; with member ids the
// placement changes only for the partitions a joining or leaving member
// wins or loses.
func standbyPlacement(g groupView, topic string, partitions []int32, replicas int) map[string][]int32 {
	out := map[string][]int32{}
	if replicas <= 0 || len(g.Members) < 2 {
		return out
	}
	owner := map[int32]string{}
	for _, m := range g.Members {
		for _, p := range m.Owned[topic] {
			owner[p] = m.ID
		}
	}
	type cand struct {
		id    string
		score uint64
		key   string
	}
	cs := make([]cand, 0, len(g.Members))
	for _, p := range partitions {
		cs = cs[:0]
		for _, m := range g.Members {
			if m.ID == owner[p] {
				continue
			}
			cs = append(cs, cand{m.ID, rendezvous(m.Key, topic, p), m.Key})
		}
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].score != cs[j].score {
				return cs[i].score > cs[j].score
			}
			return cs[i].key < cs[j].key
		})
		for _, c := range cs[:min(replicas, len(cs))] {
			out[c.id] = append(out[c.id], p)
		}
	}
	return out
}

func rendezvous(key, topic string, p int32) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(topic))
	_, _ = h.Write([]byte{0, byte(p >> 24), byte(p >> 16), byte(p >> 8), byte(p)})
	// fnv's low bits mix poorly for short inputs that differ at the end.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}
