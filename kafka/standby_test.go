package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// standbyMember is a member whose chain keeps one state entry per record
// it processes, with a changelog, and stands by for the other's
// partitions.
type standbyMember struct {
	ch   *chain.Chain
	st   *store.Memory
	m    *member
	mu   sync.Mutex
	warm map[int32]int64 // partition -> committed changelog offset caught up to
	reg  metrics.Registry
}

// signals is an Observer that signals every advance and commit.
type signals chan struct{}

func (s signals) signal() {
	select {
	case s <- struct{}{}:
	default:
	}
}
func (s signals) Begin(chain.BeginInfo)                         {}
func (s signals) Advanced(string, int32, int, int64, time.Time) { s.signal() }
func (s signals) Committed(string, int32, int64, string)        { s.signal() }

// A member with --standby-replicas 1 keeps the other member's partitions
// warm from the changelog, up to the group's commit; when the other
// member stops, the partitions it takes over restore only what was
// committed since its last catch-up instead of their whole state, and
// no state is lost. Runs on kfake and on a real broker.
func TestStandbyTakesOverWithTheTailOnly(t *testing.T) {
	b := testbroker.New(t)
	const partitions, first = 4, 400
	topic := b.Topic(t, partitions)
	group := testbroker.Name(t, "group")
	cl, err := newChangelog(t, b, topic, group, testbroker.Name(t, "state"))
	require.NoError(t, err)
	w := newWorkload(partitions, 2*first, 7)
	w.produce(t, b, topic, 0, first)

	var processed atomic.Int64
	events := make(signals, 1)
	keep := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		processed.Add(1)
		return pc.State().Set(fmt.Appendf(nil, "%d", e.Offset), e.Value, time.Time{})
	})
	start := func() *standbyMember {
		sm := &standbyMember{st: store.NewMemory(), warm: map[int32]int64{}, reg: metrics.NewRegistry()}
		cfg := groupConfig(b, topic, group, t)
		cfg.Registry = sm.reg
		cfg.StandbyReplicas, cfg.StandbyInterval = 1, 50*time.Millisecond
		cfg.Hooks.Standby = func(_ string, p int32, st chain.StandbyStats) {
			sm.mu.Lock()
			sm.warm[p] = st.Committed
			sm.mu.Unlock()
			events.signal()
		}
		sm.m = runMember(t, cfg, func(*member) *chain.Chain {
			ch, err := chain.New([]chain.Stage{{Name: "keep", Processor: keep}}, decoder,
				append(chainOptions(t, events), chain.WithStore(sm.st), chain.WithChangelog(cl))...)
			require.NoError(t, err)
			sm.ch = ch
			return ch
		})
		return sm
	}
	committedChangelog := func() map[int32]int64 {
		out := map[int32]int64{}
		for p, blk := range groupOffsets(t, b, group, topic, []int32{0, 1, 2, 3}) {
			st, ok := commit.DecodeState(blk.Metadata, blk.Offset, []string{"keep"})
			if ok {
				out[p] = st.Changelog
			}
		}
		return out
	}
	a := start()
	recv(t, a.m.active, "a's first partition")
	bm := start()
	recv(t, bm.m.active, "b's first partition")

	// Every record processed and committed, and b's standbys caught up
	// with a's partitions at their commits.
	owned := func(sm *standbyMember) map[int32]bool {
		out := map[int32]bool{}
		for _, s := range sm.ch.Stats() {
			out[s.Partition] = true
		}
		return out
	}
	deadline := time.After(2 * time.Minute)
	var aParts map[int32]bool
	var at map[int32]int64
	for {
		aParts, at = owned(a), committedChangelog()
		done := processed.Load() >= first && len(aParts) == 2 && len(owned(bm)) == 2
		bm.mu.Lock()
		for p := range aParts {
			c, ok := at[p]
			done = done && ok && bm.warm[p] == c && c > 0
		}
		bm.mu.Unlock()
		if done {
			break
		}
		select {
		case <-events:
		case <-deadline:
			t.Fatalf("b's standbys did not catch up: a owns %v, committed %v, b warm %v, processed %d", aParts, at, bm.warm, processed.Load())
		}
	}

	standbyRecords := metrics.GetOrRegisterCounter(kafka.StandbyMetricPrefix+"records", bm.reg).Count()
	assert.Positive(t, standbyRecords, "b's standbys applied a's changelog")
	err, _ = a.m.stop(t)
	require.NoError(t, err)
	final := committedChangelog()

	// b takes a's partitions over, and processes more input on all four.
	w.produce(t, b, topic, first, 2*first)
	deadline = time.After(2 * time.Minute)
	for processed.Load() < 2*first {
		select {
		case <-events:
		case <-deadline:
			t.Fatalf("processed %d of %d", processed.Load(), 2*first)
		}
	}
	// Their restore read only the records of a's final commit, not the
	// state the standby already held.
	require.Len(t, bm.ch.Stats(), partitions)
	for _, s := range bm.ch.Stats() {
		if !aParts[s.Partition] {
			continue
		}
		r := s.Restore
		assert.Equal(t, "local state is a prefix of the committed one: catching up", r.Reason, "partition %d", s.Partition)
		assert.GreaterOrEqual(t, r.From, at[s.Partition], "partition %d: the restore starts where the standby was", s.Partition)
		assert.Equal(t, final[s.Partition], r.To, "partition %d", s.Partition)
		assert.LessOrEqual(t, r.Records, final[s.Partition]-at[s.Partition], "partition %d", s.Partition)
	}

	// The state is whole: one entry per record.
	err, _ = bm.m.stop(t)
	require.NoError(t, err)
	n := 0
	for p := range int32(partitions) {
		e, err := bm.st.Entries(topic, p)
		require.NoError(t, err)
		n += len(e)
	}
	require.Equal(t, 2*first, n, "one entry per record: nothing lost, nothing twice")
}
