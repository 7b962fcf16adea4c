package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
)

// stamp is one partition start or stop in a member's log, when the test
// read it.
type stamp struct {
	m     *member
	start bool
	at    time.Time
}

// tracker follows, for every input partition, which member runs it (from
// the members' "partition started"/"partition stopped" lines) and when its
// outputs arrive (a read_committed reader of the output topic).
type tracker struct {
	mu      sync.Mutex
	events  map[int32][]stamp
	outputs map[int32][]time.Time
	changed chan struct{} // closed and replaced at every new stamp or output
}

func newTracker() *tracker {
	return &tracker{events: map[int32][]stamp{}, outputs: map[int32][]time.Time{}, changed: make(chan struct{})}
}

func (tr *tracker) notifyLocked() {
	close(tr.changed)
	tr.changed = make(chan struct{})
}

// line reads a member's log line.
func (tr *tracker) line(m *member, line string, at time.Time) {
	start := strings.Contains(line, `"msg":"partition started"`)
	if !start && !strings.Contains(line, `"msg":"partition stopped"`) {
		return
	}
	var l struct{ Partition *int32 }
	if json.Unmarshal([]byte(line), &l) != nil || l.Partition == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events[*l.Partition] = append(tr.events[*l.Partition], stamp{m, start, at})
	tr.notifyLocked()
}

func (tr *tracker) output(p int32, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.outputs[p] = append(tr.outputs[p], at)
	tr.notifyLocked()
}

// ownedBy returns the partitions m runs now: its latest stamp is a start.
func (tr *tracker) ownedBy(m *member) []int32 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var ps []int32
	for p, ev := range tr.events {
		for i := len(ev) - 1; i >= 0; i-- {
			if ev[i].m == m {
				if ev[i].start {
					ps = append(ps, p)
				}
				break
			}
		}
	}
	slices.Sort(ps)
	return ps
}

// gap is one measured move.
type gap struct {
	event      string
	moved      int           // partitions that moved (or came back to a restarted member)
	started    time.Duration // from the event until the last of them started at its new owner
	resumed    time.Duration // from the event until the last of them had an output from its new owner
	otherStops int           // partition stops of the other members meanwhile (an eager rebalance stops them all)
}

// await measures the move of moved, which the event at at took from old:
// for each, the first start by another member after at, and the first
// output after that start. It waits at most limit.
func (tr *tracker) await(t *testing.T, f *fleet, event string, old *member, at time.Time, moved []int32, limit time.Duration) gap {
	t.Helper()
	require.NotEmpty(t, moved, "%s: the member ran no partition", event)
	deadline := time.After(limit)
	for {
		tr.mu.Lock()
		g := gap{event: event, moved: len(moved)}
		done := true
		for _, p := range moved {
			var begun time.Time
			for _, s := range tr.events[p] {
				if s.start && s.m != old && s.at.After(at) {
					begun = s.at
					break
				}
			}
			if begun.IsZero() {
				done = false
				break
			}
			g.started = max(g.started, begun.Sub(at))
			i, _ := slices.BinarySearchFunc(tr.outputs[p], begun, func(a, b time.Time) int { return a.Compare(b) })
			if i == len(tr.outputs[p]) {
				done = false
				break
			}
			g.resumed = max(g.resumed, tr.outputs[p][i].Sub(at))
		}
		if done {
			for p, ev := range tr.events {
				if slices.Contains(moved, p) {
					continue
				}
				for _, s := range ev {
					if !s.start && s.m != old && s.at.After(at) && s.at.Before(at.Add(g.resumed)) {
						g.otherStops++
					}
				}
			}
		}
		ch := tr.changed
		tr.mu.Unlock()
		if done {
			t.Logf("%s: %d partitions moved; started after %v, outputs resumed after %v; %d other partitions stopped meanwhile",
				event, g.moved, g.started.Round(10*time.Millisecond), g.resumed.Round(10*time.Millisecond), g.otherStops)
			return g
		}
		select {
		case <-ch:
		case <-deadline:
			var logs strings.Builder
			for _, m := range f.members {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", m.name, m.logs.String())
			}
			t.Fatalf("%s: the moved partitions %v did not resume within %v\n%s", event, moved, limit, logs.String())
		}
	}
}

// settle waits until every partition had an output after from: the whole
// fleet runs again.
func (tr *tracker) settle(t *testing.T, partitions int, from time.Time) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		tr.mu.Lock()
		ok := true
		for p := range partitions {
			o := tr.outputs[int32(p)]
			if len(o) == 0 || !o[len(o)-1].After(from) {
				ok = false
			}
		}
		ch := tr.changed
		tr.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("not every partition had an output within 2 minutes of %v", from)
		}
	}
}

// watchOutputs feeds tr with the arrival of every output (read_committed:
// when its transaction commits), by input partition.
func watchOutputs(t *testing.T, ctx context.Context, f *fleet, tr *tracker) {
	t.Helper()
	cc := f.b.Config()
	cc.Consumer.IsolationLevel = sarama.ReadCommitted
	cons, err := sarama.NewConsumer(f.b.Addrs(), cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cons.Close() })
	for p := range f.partitions {
		pc, err := cons.ConsumePartition(f.out, int32(p), sarama.OffsetOldest)
		require.NoError(t, err)
		t.Cleanup(pc.AsyncClose)
		go func() {
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					for _, h := range m.Headers {
						if string(h.Key) == attribution.SourceHeader {
							if ip, _, err := attribution.ParseSource(h.Value); err == nil {
								tr.output(ip, time.Now())
							}
						}
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

// stream produces recs into the fleet's input at about rate records a
// second until stop is called, which returns once the last batch is
// written and remembered in f.parts (stream owns f.parts until then).
func stream(t *testing.T, f *fleet, recs []workload.Record, rate int) (stop func() int) {
	t.Helper()
	const tick = 20 * time.Millisecond
	per := max(1, rate*int(tick)/int(time.Second))
	quit, done := make(chan struct{}), make(chan error, 1)
	sent := 0
	go func() {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for sent < len(recs) {
			select {
			case <-quit:
				done <- nil
				return
			case <-tk.C:
			}
			batch := recs[sent:min(sent+per, len(recs))]
			msgs := make([]*sarama.ProducerMessage, len(batch))
			for i, r := range batch {
				msgs[i] = &sarama.ProducerMessage{Topic: f.in, Key: sarama.ByteEncoder(r.Key), Value: sarama.ByteEncoder(r.Value), Timestamp: r.Timestamp}
			}
			if err := f.producer.SendMessages(msgs); err != nil {
				done <- err
				return
			}
			for _, m := range msgs {
				f.parts[m.Partition] = append(f.parts[m.Partition], chain.Record{
					Topic: f.in, Partition: m.Partition, Offset: m.Offset,
					Key: []byte(m.Key.(sarama.ByteEncoder)), Value: []byte(m.Value.(sarama.ByteEncoder)), Timestamp: m.Timestamp,
				})
			}
			sent += len(batch)
		}
		done <- fmt.Errorf("the stream ran out of its %d records: generate more", len(recs))
	}()
	var once sync.Once
	var err error
	end := func() {
		once.Do(func() {
			close(quit)
			err = <-done
		})
	}
	// A failed test stops the stream before the producer closes (cleanups
	// run last first; newFleet registered the producer's).
	t.Cleanup(end)
	return func() int {
		end()
		require.NoError(t, err)
		return sent
	}
}

// TestFleetFailoverGap is the fleet benchmark: three `differential run`
// processes (exactly-once, the defaults' 10 s session timeout and 1 s
// heartbeat) under a streaming input, then, one after the other, a member
// stopped (SIGTERM) and restarted at once, one SIGKILLed and restarted at
// once, one SIGKILLed for good, one stopped for good, and one added (and,
// static, one more stopped for good without --leave-on-stop). For
// each move it measures how long the moved partitions stand still: from
// the signal (or the new process's start) until they started at their new
// owner, and until their first output from it; and how many partitions of
// the other members stopped meanwhile. Every assignor, with dynamic and
// static members (--instance-id; the first one stopped for good has
// --leave-on-stop, the last one not). At the end the outputs are the model's, each exactly
// once. Opt-in (DIFFERENTIAL_FLEET_BENCH=1, a real broker): a few minutes.
// DIFFERENTIAL_FLEET_BENCH_FLAGS adds flags to every member (say
// "--heartbeat-interval 3s"), split at spaces.
func TestFleetFailoverGap(t *testing.T) {
	if os.Getenv("DIFFERENTIAL_FLEET_BENCH") == "" || os.Getenv("DIFFERENTIAL_TEST_BROKERS") == "" {
		t.Skip("the fleet benchmark: set DIFFERENTIAL_FLEET_BENCH=1 and DIFFERENTIAL_TEST_BROKERS (a real broker; docs/testing.md)")
	}
	bin := buildCLI(t)
	var table strings.Builder
	table.WriteString("| assignor | members | move | partitions moved | started after | outputs resumed after | other partitions stopped |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, assignor := range []string{"sticky", "cooperative-sticky"} {
		for _, static := range []bool{false, true} {
			kind := "dynamic"
			if static {
				kind = "static"
			}
			t.Run(assignor+"/"+kind, func(t *testing.T) {
				for _, g := range failoverRun(t, bin, assignor, static) {
					fmt.Fprintf(&table, "| `%s` | %s | %s | %d | %.1f s | %.1f s | %d |\n", assignor, kind, g.event, g.moved,
						g.started.Seconds(), g.resumed.Seconds(), g.otherStops)
				}
			})
		}
	}
	t.Logf("failover gaps:\n%s", table.String())
}

func failoverRun(t *testing.T, bin, assignor string, static bool) []gap {
	const (
		partitions = 8
		rate       = 1000 // records a second
	)
	f := newFleet(t, bin, "failover", partitions, assignor, true, strings.Fields(os.Getenv("DIFFERENTIAL_FLEET_BENCH_FLAGS"))...)
	wc := f.workload(240_000, 4000, 61)
	f.cfg.IdleTimeout = 10 * time.Minute
	recs := workload.Generate(wc)

	tr := newTracker()
	f.onLine = tr.line
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watchOutputs(t, ctx, f, tr)
	id := func(name string, more ...string) []string {
		if !static {
			return nil
		}
		return append([]string{"--instance-id", name}, more...)
	}

	stop := stream(t, f, recs, rate)
	a := f.start(t, "a", id("a", "--leave-on-stop")...)
	b := f.start(t, "b", id("b")...)
	c := f.start(t, "c", id("c")...)
	for _, m := range []*member{a, b, c} {
		f.waitStarted(t, m)
	}
	tr.settle(t, partitions, time.Now())
	var gaps []gap
	const limit = 2 * time.Minute

	// A rolling restart of c: SIGTERM, then the same process again.
	moved, at := tr.ownedBy(c), time.Now()
	f.stop(t, c)
	c = f.start(t, "c", id("c")...)
	gaps = append(gaps, tr.await(t, f, "SIGTERM, restart at once", nil, at, moved, limit))
	// A dynamic c's partitions ran elsewhere meanwhile; it gets some back
	// at the next rebalance.
	f.waitStarted(t, c)
	tr.settle(t, partitions, time.Now())

	// c crashes and is restarted at once.
	old := c
	moved, at = tr.ownedBy(c), time.Now()
	f.kill(t, c)
	c = f.start(t, "c", id("c")...)
	gaps = append(gaps, tr.await(t, f, "SIGKILL, restart at once", old, at, moved, limit))
	f.waitStarted(t, c)
	tr.settle(t, partitions, time.Now())

	// b crashes for good.
	moved, at = tr.ownedBy(b), time.Now()
	f.kill(t, b)
	gaps = append(gaps, tr.await(t, f, "SIGKILL", b, at, moved, limit))
	tr.settle(t, partitions, time.Now())

	// a stops for good (a static a leaves: --leave-on-stop).
	moved, at = tr.ownedBy(a), time.Now()
	f.stop(t, a)
	gaps = append(gaps, tr.await(t, f, "SIGTERM", a, at, moved, limit))
	tr.settle(t, partitions, time.Now())

	// d joins c: what moves is known once the group settled.
	at = time.Now()
	d := f.start(t, "d", id("d")...)
	f.waitStarted(t, d)
	tr.settle(t, partitions, time.Now())
	gaps = append(gaps, tr.await(t, f, "a member joins", nil, at, tr.ownedBy(d), limit))

	last := []*member{c, d}
	if static {
		// c stops for good without --leave-on-stop: the group keeps its
		// partitions for a restart that does not come, until its session
		// times out.
		tr.settle(t, partitions, time.Now())
		moved, at = tr.ownedBy(c), time.Now()
		f.stop(t, c)
		gaps = append(gaps, tr.await(t, f, "SIGTERM without --leave-on-stop", c, at, moved, limit))
		last = []*member{d}
	}

	sent := stop()
	t.Logf("streamed %d records at %d/s", sent, rate)
	f.sentinels(t)
	f.waitCovered(t, 0, "the last members: everything")
	for _, m := range last {
		f.stop(t, m)
	}
	f.b.WaitStable(t, f.out)
	f.b.WaitStable(t, f.dlq)
	f.verify(t)
	return gaps
}

// TestStandbyFailoverGap is the standby benchmark: two `differential run`
// processes (exactly-once, the defaults' 10 s session timeout) over a
// two-partition input whose backlog gives each partition a large state,
// then a streaming input; the owner of one partition is SIGKILLed, and the
// gap is measured from the kill until the partition's outputs resume at
// the other member — without standbys (the survivor restores the whole
// state from the changelog) and with --standby-replicas 1 (it holds the
// state warm and restores the tail). The outputs are the model's, each
// exactly once. Opt-in (DIFFERENTIAL_FLEET_BENCH=1, a real broker);
// DIFFERENTIAL_STANDBY_BENCH_RECORDS sets the backlog (default 1,000,000
// records).
func TestStandbyFailoverGap(t *testing.T) {
	if os.Getenv("DIFFERENTIAL_FLEET_BENCH") == "" || os.Getenv("DIFFERENTIAL_TEST_BROKERS") == "" {
		t.Skip("the standby benchmark: set DIFFERENTIAL_FLEET_BENCH=1 and DIFFERENTIAL_TEST_BROKERS (a real broker; docs/testing.md)")
	}
	records := 1_000_000
	if v := os.Getenv("DIFFERENTIAL_STANDBY_BENCH_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "DIFFERENTIAL_STANDBY_BENCH_RECORDS")
		records = n
	}
	bin := buildCLI(t)
	var table strings.Builder
	table.WriteString("| standbys | changelog records the restore read | restore | partition started after | outputs resumed after |\n|---|---:|---:|---:|---:|\n")
	for _, standbys := range []int{0, 1} {
		t.Run(fmt.Sprintf("standbys=%d", standbys), func(t *testing.T) {
			g, restored, took := standbyRun(t, bin, records, standbys)
			fmt.Fprintf(&table, "| %d | %d | %.1f s | %.1f s | %.1f s |\n", standbys, restored, took.Seconds(),
				g.started.Seconds(), g.resumed.Seconds())
		})
	}
	t.Logf("SIGKILL failover, %d records of backlog:\n%s", records, table.String())
}

// standbyRun is one cell of TestStandbyFailoverGap: the gap, and the
// changelog records the survivor's restore of the moved partition read and
// how long it took (from its "partition state restored" line).
func standbyRun(t *testing.T, bin string, records, standbys int) (gap, int64, time.Duration) {
	const partitions = 2
	f := newFleet(t, bin, "standby", partitions, "sticky", true, "--standby-replicas", strconv.Itoa(standbys))
	wc := f.workload(records+200_000, records/10, 67)
	// Uniform users: the model's install rule scans a user's clicks, so a
	// Zipf-hot user of a million-record log makes it quadratic.
	wc.ZipfS = 0
	f.cfg.IdleTimeout = 10 * time.Minute
	recs := workload.Generate(wc)
	backlog, live := recs[:records], recs[records:]

	tr := newTracker()
	type restore struct {
		m       *member
		records int64
		seconds float64
	}
	var mu sync.Mutex
	restores := map[int32][]restore{}
	warm := map[*member]map[int32]bool{}
	changed := make(chan struct{}, 1)
	f.onLine = func(m *member, line string, at time.Time) {
		tr.line(m, line, at)
		var l struct {
			Msg       string
			Partition *int32
			Records   int64
			Seconds   float64
		}
		if !strings.Contains(line, `"msg":"partition state restored"`) && !strings.Contains(line, `"msg":"standby warm"`) {
			return
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Partition == nil {
			return
		}
		mu.Lock()
		if l.Msg == "standby warm" {
			if warm[m] == nil {
				warm[m] = map[int32]bool{}
			}
			warm[m][*l.Partition] = true
		} else {
			restores[*l.Partition] = append(restores[*l.Partition], restore{m, l.Records, l.Seconds})
		}
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watchOutputs(t, ctx, f, tr)

	for i := 0; i < len(backlog); i += 50_000 {
		f.produce(t, backlog[i:min(i+50_000, len(backlog))])
	}
	a := f.start(t, "a")
	b := f.start(t, "b")
	f.waitStarted(t, a)
	f.waitStarted(t, b)
	f.waitCovered(t, 300, "the backlog")
	stop := stream(t, f, live, 1000)
	tr.settle(t, partitions, time.Now())
	victim, survivor := a, b
	if len(tr.ownedBy(a)) != 1 {
		t.Fatalf("a runs %v, want one partition of two", tr.ownedBy(a))
	}
	moved := tr.ownedBy(victim)
	if standbys > 0 {
		// The survivor holds the victim's partition warm before the kill.
		deadline := time.After(5 * time.Minute)
		for {
			mu.Lock()
			ok := warm[survivor][moved[0]]
			mu.Unlock()
			if ok {
				break
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("b never held partition %d warm\n%s", moved[0], survivor.logs.String())
			}
		}
	}
	at := time.Now()
	f.kill(t, victim)
	g := tr.await(t, f, "SIGKILL", victim, at, moved, 3*time.Minute)

	sent := stop()
	t.Logf("streamed %d records at 1000/s after a backlog of %d", sent, len(backlog))
	f.sentinels(t)
	f.waitCovered(t, 0, "everything")
	f.stop(t, survivor)
	f.b.WaitStable(t, f.out)
	f.b.WaitStable(t, f.dlq)
	f.verify(t)

	mu.Lock()
	defer mu.Unlock()
	rs := restores[moved[0]]
	require.NotEmpty(t, rs)
	last := rs[len(rs)-1]
	require.Equal(t, survivor, last.m, "the survivor restored the moved partition")
	return g, last.records, time.Duration(last.seconds * float64(time.Second))
}
