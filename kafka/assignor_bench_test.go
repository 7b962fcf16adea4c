package kafka_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// movement records, across the members of a group, every partition start
// and stop: how many starts, how many of them on another member than the
// partition's last, how long partitions stood unassigned, and how many
// changelog records the starts restored.
type movement struct {
	mu       sync.Mutex
	owner    map[int32]string    // current owner ("" when unassigned)
	last     map[int32]string    // last owner
	released map[int32]time.Time // when the partition was released
	starts   int
	moves    int
	paused   time.Duration
	changed  chan struct{}
	restored atomic.Int64
}

func newMovement() *movement {
	return &movement{owner: map[int32]string{}, last: map[int32]string{}, released: map[int32]time.Time{}, changed: make(chan struct{})}
}

func (m *movement) hooks(member string) kafka.Hooks {
	return kafka.Hooks{
		Assigned: func(_ string, p int32, _ int64) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.starts++
			if l, ok := m.last[p]; ok && l != member {
				m.moves++
			}
			if r, ok := m.released[p]; ok {
				m.paused += time.Since(r)
				delete(m.released, p)
			}
			m.owner[p], m.last[p] = member, member
			m.notifyLocked()
		},
		Released: func(_ string, p int32, _ error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.owner[p] = ""
			m.released[p] = time.Now()
			m.notifyLocked()
		},
	}
}

func (m *movement) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// settled waits until every partition is owned and exactly the members
// named own at least one each.
func (m *movement) settled(tb testing.TB, partitions int32, members []string) {
	tb.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		m.mu.Lock()
		ch := m.changed
		owners := map[string]bool{}
		all := true
		for p := range partitions {
			o := m.owner[p]
			all = all && o != ""
			owners[o] = true
		}
		ok := all && len(owners) == len(members)
		for _, n := range members {
			ok = ok && owners[n]
		}
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("group did not settle on %v within 2 minutes", members)
		}
	}
}

// countingStore counts the changelog records its partitions restore.
type countingStore struct {
	chain.Store
	n *atomic.Int64
}

func (s countingStore) OpenPartition(topic string, p int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.Store.OpenPartition(topic, p, stages)
	if err != nil {
		return nil, err
	}
	return countingPartition{ps.(chain.ChangelogStore), s.n}, nil
}

type countingPartition struct {
	chain.ChangelogStore
	n *atomic.Int64
}

func (p countingPartition) Restore(recs []chain.ChangelogRecord, next int64) error {
	p.n.Add(int64(len(recs)))
	return p.ChangelogStore.Restore(recs, next)
}

// BenchmarkAssignorMovement measures what a sequence of membership changes
// costs under each balance strategy: 12 partitions; members a, b, c join one
// after the other, b leaves cleanly, d joins, a leaves. Reported per run:
// partition starts (each one a drain and final commit on the old owner,
// then a restore check), moves to another member (each one a restore from
// the changelog), changelog records restored, and the partition-seconds
// during which partitions stood unassigned.
//
//	go test ./kafka -run XXX -bench AssignorMovement -benchtime 1x
func BenchmarkAssignorMovement(b *testing.B) {
	for _, st := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
	}{
		{"sticky", sarama.NewBalanceStrategySticky},
		{"cooperative-sticky", sarama.NewBalanceStrategyCooperativeSticky},
	} {
		b.Run(st.name, func(b *testing.B) {
			var starts, moves, restored int64
			var paused time.Duration
			for range b.N {
				m := assignorRun(b, st.strategy)
				b.Logf("%d starts, %d moves, %d changelog records restored, %.1f partition-seconds unassigned",
					m.starts, m.moves, m.restored.Load(), m.paused.Seconds())
				starts, moves, restored, paused = starts+int64(m.starts), moves+int64(m.moves), restored+m.restored.Load(), paused+m.paused
			}
			n := float64(b.N)
			b.ReportMetric(float64(starts)/n, "starts/op")
			b.ReportMetric(float64(moves)/n, "moves/op")
			b.ReportMetric(float64(restored)/n, "restored/op")
			b.ReportMetric(paused.Seconds()/n, "paused-partition-s/op")
		})
	}
}

func assignorRun(tb testing.TB, strategy func() sarama.BalanceStrategy) *movement {
	const partitions = 12
	br := testbroker.New(tb)
	topic := br.Topic(tb, partitions)
	group := testbroker.Name(tb, "assignor")
	cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{Brokers: br.Addrs(), InputTopic: topic, Group: group, Sarama: br.Config()})
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	// Each record's processor keeps per-key state, so moves restore it.
	keep := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{})
	})
	mv := newMovement()
	produce := func(n int, seed uint64) {
		w := newWorkload(partitions, n, seed)
		p, err := sarama.NewSyncProducer(br.Addrs(), br.Config())
		if err != nil {
			tb.Fatal(err)
		}
		defer p.Close()
		for _, m := range w.msgs {
			m.Topic = topic
			m.Partition = -1 // by key
		}
		if err := p.SendMessages(w.msgs); err != nil {
			tb.Fatal(err)
		}
	}
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	members := map[string]running{}
	start := func(name string) {
		ch, err := chain.New([]chain.Stage{{Name: "keep", Processor: keep}}, decoder,
			chain.WithStore(countingStore{store.NewMemory(), &mv.restored}), chain.WithChangelog(cl),
			chain.WithCommitInterval(100*time.Millisecond), chain.WithIdleTimeout(50*time.Millisecond),
			chain.WithShutdownTimeout(5*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := running{cancel, make(chan error, 1)}
		go func() {
			r.done <- kafka.Run(ctx, ch, kafka.Config{Brokers: br.Addrs(), Topic: topic, Group: group,
				Sarama: br.Config(), Strategy: strategy(), Hooks: mv.hooks(name), RebalanceTimeout: 30 * time.Second})
		}()
		members[name] = r
	}
	stop := func(name string) {
		members[name].cancel()
		if err := <-members[name].done; err != nil {
			tb.Fatalf("member %s: %v", name, err)
		}
		delete(members, name)
	}
	defer func() {
		for n := range members {
			stop(n)
		}
	}()
	steps := []struct {
		join, leave string
		after       []string
	}{
		{join: "a", after: []string{"a"}},
		{join: "b", after: []string{"a", "b"}},
		{join: "c", after: []string{"a", "b", "c"}},
		{leave: "b", after: []string{"a", "c"}},
		{join: "d", after: []string{"a", "c", "d"}},
		{leave: "a", after: []string{"c", "d"}},
	}
	for i, s := range steps {
		produce(3000, uint64(i))
		if s.join != "" {
			start(s.join)
		} else {
			stop(s.leave)
		}
		mv.settled(tb, partitions, s.after)
	}
	for n := range members {
		stop(n)
	}
	return mv
}
