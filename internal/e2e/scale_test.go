package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// sessionLog keeps, per member, when it logged "session started" and the
// partitions that session claimed.
type sessionLog struct {
	mu       sync.Mutex
	sessions map[*member][]session
}

type session struct {
	at     time.Time
	claims []int32
}

func (sl *sessionLog) line(m *member, line string, at time.Time) {
	if !strings.Contains(line, `"msg":"session started"`) {
		return
	}
	var l struct{ Partitions []int32 }
	if json.Unmarshal([]byte(line), &l) != nil {
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.sessions[m] = append(sl.sessions[m], session{at, l.Partitions})
}

// settled reports whether, after at, every member of live joined a new
// session and started every partition it claims that holds a record (a
// partition starts at its first record: an empty one waits for it), and
// their claims cover all partitions; then also when the last of those
// starts came, when each member's session started, and how many of those
// partitions another member ran just before at.
func settled(f *fleet, tr *tracker, sl *sessionLog, live []*member, at time.Time) (done bool, last time.Time, joined map[*member]time.Time, moved int) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	joined = map[*member]time.Time{}
	covered := map[int32]bool{}
	for _, m := range live {
		ss := sl.sessions[m]
		if len(ss) == 0 || !ss[len(ss)-1].at.After(at) {
			return false, time.Time{}, nil, 0
		}
		s := ss[len(ss)-1]
		joined[m] = s.at
		for _, p := range s.claims {
			covered[p] = true
			if len(f.parts[p]) == 0 {
				continue
			}
			var begun time.Time
			for _, st := range tr.events[p] {
				if st.start && st.m == m && !st.at.Before(s.at) {
					begun = st.at
				}
			}
			if begun.IsZero() {
				return false, time.Time{}, nil, 0
			}
			last = later(last, begun)
			var before *member
			for _, st := range tr.events[p] {
				if st.start && st.at.Before(at) {
					before = st.m
				}
			}
			if before != m {
				moved++
			}
		}
	}
	return len(covered) == f.partitions, last, joined, moved
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// awaitSettled waits (at most limit) until settled holds.
func awaitSettled(t *testing.T, f *fleet, tr *tracker, sl *sessionLog, live []*member, at time.Time, limit time.Duration) (last time.Time, joined map[*member]time.Time, moved int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		tr.mu.Lock()
		ch := tr.changed
		tr.mu.Unlock()
		if done, last, joined, moved := settled(f, tr, sl, live, at); done {
			return last, joined, moved
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond): // a session line changes no tracker stamp; the bound is the deadline
		case <-f.exits:
			for _, m := range live {
				select {
				case err := <-m.exited:
					t.Fatalf("%s exited early: %v\n%s", m.name, err, m.logs.String())
				default:
				}
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, m := range live {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", m.name, m.logs.String())
			}
			t.Fatalf("the partitions did not settle within %v\n%s", limit, logs.String())
		}
	}
}

// waitShare waits until the reader has seen at least share of the outputs
// the model gives for the log so far: most of the input is processed (the
// rest is the tail that waits for later input).
func (f *fleet) waitShare(t *testing.T, share float64, what string) {
	t.Helper()
	f.expected()
	want := int(share * float64(len(f.want)))
	deadline := time.After(4 * time.Minute)
	for {
		f.outputs.mu.Lock()
		n := 0
		for id := range f.want {
			if f.outputs.seen[id] {
				n++
			}
		}
		ch := f.outputs.changed
		f.outputs.mu.Unlock()
		if n >= want {
			t.Logf("%s: %d of %d outputs present", what, n, len(f.want))
			return
		}
		select {
		case <-ch:
		case <-f.exits:
			for _, m := range f.members {
				select {
				case err := <-m.exited:
					t.Fatalf("%s exited early: %v\n%s", m.name, err, m.logs.String())
				default:
				}
			}
		case <-deadline:
			t.Fatalf("%s: %d of %d outputs after 4 minutes", what, n, len(f.want))
		}
	}
}

// rssKB reads a running member's resident set (VmRSS) and its peak so far
// (VmHWM), in KB.
func rssKB(t *testing.T, m *member) (rss, peak int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 2 {
			continue
		}
		switch fs[0] {
		case "VmRSS:":
			rss, _ = strconv.Atoi(fs[1])
		case "VmHWM:":
			peak, _ = strconv.Atoi(fs[1])
		}
	}
	return rss, peak
}

// scaleRow is one partition count's measurements.
type scaleRow struct {
	partitions    int
	empty         int           // partitions without a record when a starts
	join, startup time.Duration // from a's start: its session, every partition started
	rssAlone      int           // a's peak RSS (KB) when alone, most of the input processed
	joinSettled   time.Duration // b joins: from its start until both run every partition they claim
	joinMoved     int           // partitions that moved to b
	bJoined       time.Duration // b's start until its session started
	leaveSettled  time.Duration // b SIGTERMed: until a ran every partition again
	leaveMoved    int
	rssA, rssB    int           // peak RSS (KB) until each was stopped
	cpu           time.Duration // a's and b's CPU (user and system) over the run
	// a restarted at the end on its state directory: its session, every
	// partition started
	restartJoin, restartStartup time.Duration
	changelogRecs               int
	changelogBytes              int64
	liveEntries                 int
	liveBytes                   int64
	inputRecords                int
	inputBytes                  int64
	outputRecords               int
	outputBytes                 int64
	// live entries and their bytes by state key prefix (click, install,
	// seen event id)
	liveBy      map[string]int
	liveBytesBy map[string]int64
	// valid events by type, and the event-time span of the input
	types map[string]int
	span  time.Duration
}

// TestPartitionScale measures what the partition count costs one instance
// on a real broker: for each count, one `differential run` process (exactly-once,
// the engine's default commit interval, --buffer-budget 1572864) starts on
// an input that holds most of the workload — from its start until its
// session started and until every partition that holds a record logged
// "partition started" (an empty partition starts at its first record) —;
// once most outputs are out, a second process joins (until both run every
// partition they claim), more input arrives, the second is stopped with
// SIGTERM (until the first runs every partition again), and the rest of the
// input follows; at the end a restarts on its state directory (until every
// partition started again). Each process's peak RSS, both processes' CPU, the
// input's, outputs' and changelog's records and bytes (the changelog's
// appended and live, by state key), and at the end the outputs equal the model's, each
// exactly once, and every partition's committed offset is at its log end.
// Opt-in (DIFFERENTIAL_SCALE_BENCH=1, a real broker); the counts are
// DIFFERENTIAL_SCALE_PARTITIONS (default 8,64,256,1024), the records
// DIFFERENTIAL_SCALE_RECORDS (default 200000); DIFFERENTIAL_SCALE_FLAGS adds
// flags to both processes (say "--standby-replicas 1"), split at spaces.
func TestPartitionScale(t *testing.T) {
	if os.Getenv("DIFFERENTIAL_SCALE_BENCH") == "" || os.Getenv("DIFFERENTIAL_TEST_BROKERS") == "" {
		t.Skip("the partition-count benchmark: set DIFFERENTIAL_SCALE_BENCH=1 and DIFFERENTIAL_TEST_BROKERS (a real broker; docs/testing.md)")
	}
	counts := []int{8, 64, 256, 1024}
	if s := os.Getenv("DIFFERENTIAL_SCALE_PARTITIONS"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "DIFFERENTIAL_SCALE_PARTITIONS")
			counts = append(counts, n)
		}
	}
	records := 200_000
	if s := os.Getenv("DIFFERENTIAL_SCALE_RECORDS"); s != "" {
		var err error
		records, err = strconv.Atoi(s)
		require.NoError(t, err, "DIFFERENTIAL_SCALE_RECORDS")
	}
	bin := buildCLI(t)
	var rows []scaleRow
	for _, n := range counts {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			rows = append(rows, scaleRun(t, bin, n, records))
		})
	}
	mb := func(kb int) string { return fmt.Sprintf("%d MB", kb*1024/1_000_000) }
	var table strings.Builder
	table.WriteString("| partitions (empty) | joined | all started | peak RSS alone | b joins: settled | moved | b's session | b SIGTERM: settled | moved | peak RSS a / b | restart: session | all started |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var cl strings.Builder
	cl.WriteString("| partitions | input records | CPU s (a + b) | CPU µs per input record | changelog records | bytes | per input record | live entries | live bytes |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&table, "| %d (%d) | %.2f s | %.2f s | %s | %.2f s | %d | %.2f s | %.2f s | %d | %s / %s | %.2f s | %.2f s |\n",
			r.partitions, r.empty, r.join.Seconds(), r.startup.Seconds(), mb(r.rssAlone), r.joinSettled.Seconds(), r.joinMoved,
			r.bJoined.Seconds(), r.leaveSettled.Seconds(), r.leaveMoved, mb(r.rssA), mb(r.rssB),
			r.restartJoin.Seconds(), r.restartStartup.Seconds())
		fmt.Fprintf(&cl, "| %d | %d | %.1f | %.1f | %d | %d | %.1f B in %.2f records | %d | %d |\n", r.partitions, r.inputRecords,
			r.cpu.Seconds(), float64(r.cpu.Microseconds())/float64(r.inputRecords), r.changelogRecs, r.changelogBytes, float64(r.changelogBytes)/float64(r.inputRecords),
			float64(r.changelogRecs)/float64(r.inputRecords), r.liveEntries, r.liveBytes)
	}
	var kinds strings.Builder
	kinds.WriteString("| partitions | input bytes per record | outputs per input record | output bytes per output | events by type | event-time span | live entries (bytes per entry) by state key |\n|---:|---:|---:|---:|---|---:|---|\n")
	for _, r := range rows {
		var live []string
		for _, k := range []string{attribution.ClickKeyPrefix, attribution.InstallKeyPrefix, attribution.SeenKeyPrefix, "other"} {
			if n := r.liveBy[k]; n > 0 {
				live = append(live, fmt.Sprintf("%s %d (%.1f)", k, n, float64(r.liveBytesBy[k])/float64(n)))
			}
		}
		fmt.Fprintf(&kinds, "| %d | %.1f | %.3f | %.1f | %s %d, %s %d, %s %d | %.1f days | %s |\n", r.partitions,
			float64(r.inputBytes)/float64(r.inputRecords), float64(r.outputRecords)/float64(r.inputRecords),
			float64(r.outputBytes)/float64(r.outputRecords), attribution.TypeClick, r.types[attribution.TypeClick],
			attribution.TypeInstall, r.types[attribution.TypeInstall], attribution.TypePurchase, r.types[attribution.TypePurchase],
			r.span.Hours()/24, strings.Join(live, ", "))
	}
	t.Logf("partition counts:\n%s\nchangelog:\n%s\nrecords and state:\n%s", table.String(), cl.String(), kinds.String())
}

func scaleRun(t *testing.T, bin string, partitions, records int) scaleRow {
	f := newFleet(t, bin, "scale", partitions, "sticky", true, append([]string{"--commit-interval", "1s", "--buffer-budget", "1572864"},
		strings.Fields(os.Getenv("DIFFERENTIAL_SCALE_FLAGS"))...)...)
	wc := f.workload(records, workload.DefaultConfig().Users, 71)
	f.cfg.IdleTimeout = 10 * time.Minute
	recs := workload.Generate(wc)
	slice := func(from, to int) []workload.Record { return recs[from*len(recs)/10 : to*len(recs)/10] }

	tr := newTracker()
	sl := &sessionLog{sessions: map[*member][]session{}}
	f.onLine = func(m *member, line string, at time.Time) {
		sl.line(m, line, at)
		tr.line(m, line, at)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watchOutputs(t, ctx, f, tr)
	row := scaleRow{partitions: partitions, liveBy: map[string]int{}, liveBytesBy: map[string]int64{}, types: map[string]int{}}
	const limit = 3 * time.Minute

	f.produce(t, slice(0, 8))
	for _, p := range f.parts {
		if len(p) == 0 {
			row.empty++
		}
	}
	at := time.Now()
	a := f.start(t, "a")
	last, joined, _ := awaitSettled(t, f, tr, sl, []*member{a}, at, limit)
	row.join, row.startup = joined[a].Sub(at), last.Sub(at)
	t.Logf("a: session after %v, every partition started after %v", row.join, row.startup)
	f.waitShare(t, 0.9, "a alone")
	_, row.rssAlone = rssKB(t, a)

	at = time.Now()
	b := f.start(t, "b")
	last, joined, row.joinMoved = awaitSettled(t, f, tr, sl, []*member{a, b}, at, limit)
	row.joinSettled = last.Sub(at)
	row.bJoined = joined[b].Sub(at)
	t.Logf("b joins: session after %v, settled after %v, %d partitions moved", row.bJoined, last.Sub(at), row.joinMoved)
	f.produce(t, slice(8, 9))
	f.waitShare(t, 0.9, "a, b")

	// VmHWM, not the exited process's rusage: that includes the memory
	// of the test process it was forked from.
	_, row.rssB = rssKB(t, b)
	at = time.Now()
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	last, _, row.leaveMoved = awaitSettled(t, f, tr, sl, []*member{a}, at, limit)
	row.leaveSettled = last.Sub(at)
	select {
	case err := <-b.exited:
		require.NoError(t, err, "b exits 0 after SIGTERM\n%s", b.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("b did not exit within 2 minutes of SIGTERM\n%s", b.logs.String())
	}
	delete(f.members, b.name)
	row.cpu += b.cmd.ProcessState.UserTime() + b.cmd.ProcessState.SystemTime()
	t.Logf("b leaves: a runs every partition after %v, %d moved", row.leaveSettled, row.leaveMoved)

	f.produce(t, slice(9, 10))
	f.sentinels(t)
	f.waitCovered(t, 0, "a again: everything")
	_, row.rssA = rssKB(t, a)
	f.stop(t, a)
	row.cpu += a.cmd.ProcessState.UserTime() + a.cmd.ProcessState.SystemTime()
	// a restarts on its state directory: every partition's local state
	// matches its committed checkpoint, and the changelog exists.
	at = time.Now()
	a = f.start(t, "a")
	last, joined, _ = awaitSettled(t, f, tr, sl, []*member{a}, at, limit)
	row.restartJoin, row.restartStartup = joined[a].Sub(at), last.Sub(at)
	t.Logf("a restarted: session after %v, every partition started after %v", row.restartJoin, row.restartStartup)
	f.stop(t, a)
	f.b.WaitStable(t, f.out)
	f.b.WaitStable(t, f.dlq)
	f.verify(t)

	// The changelog: what the run appended, and what a compacted copy
	// keeps (the last record of each key, unless a tombstone).
	client, err := sarama.NewClient(f.b.Addrs(), f.b.Config())
	require.NoError(t, err)
	defer client.Close()
	changelog, err := kfetch.ReadTopic(context.Background(), client, kafka.ChangelogTopic(f.group, f.in), true)
	require.NoError(t, err)
	for _, ms := range changelog {
		live := map[string]int{}
		for _, m := range ms {
			row.changelogRecs++
			row.changelogBytes += int64(len(m.Key) + len(m.Value))
			if m.Value == nil {
				delete(live, string(m.Key))
			} else {
				live[string(m.Key)] = len(m.Key) + len(m.Value)
			}
		}
		for k, n := range live {
			row.liveEntries++
			row.liveBytes += int64(n)
			kind := "other"
			for _, pfx := range []string{attribution.ClickKeyPrefix, attribution.InstallKeyPrefix, attribution.SeenKeyPrefix} {
				if strings.HasPrefix(k, pfx) {
					kind = pfx
				}
			}
			row.liveBy[kind]++
			row.liveBytesBy[kind] += int64(n)
		}
	}
	var first, lastEvent time.Time
	for _, p := range f.parts {
		row.inputRecords += len(p)
		for i := range p {
			row.inputBytes += int64(len(p[i].Key) + len(p[i].Value))
			if ev, err := reference.Parse(&p[i], f.cfg); err == nil {
				row.types[ev.Type]++
				if first.IsZero() || ev.Time.Before(first) {
					first = ev.Time
				}
				if ev.Time.After(lastEvent) {
					lastEvent = ev.Time
				}
			}
		}
	}
	row.span = lastEvent.Sub(first)
	for _, ms := range f.b.ReadAll(t, f.out, true) {
		for _, m := range ms {
			row.outputRecords++
			row.outputBytes += int64(len(m.Key) + len(m.Value))
		}
	}
	return row
}

// cpuTicks is a running member's CPU so far (user and system), in clock
// ticks (/proc/<pid>/stat).
func cpuTicks(t *testing.T, m *member) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	require.NoError(t, err)
	// The fields after the command name, which is in parentheses.
	fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err := strconv.ParseInt(fs[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fs[12], 10, 64)
	require.NoError(t, err)
	return utime + stime
}

// inputEnd is the sum of the input partitions' end offsets.
func inputEnd(t *testing.T, client sarama.Client, f *fleet) int64 {
	t.Helper()
	var n int64
	for p := range f.partitions {
		o, err := client.GetOffset(f.in, int32(p), sarama.OffsetNewest)
		require.NoError(t, err)
		n += o
	}
	return n
}

// TestPartitionSteadyCPU measures what a partition costs one instance in
// steady state, beside its records: for each partition count, one
// `differential run` (as in TestPartitionScale) under an input streamed at
// the same total rate, its CPU over a window once every partition started,
// ÷ the records written meanwhile. The difference between two counts at
// one rate is the partitions' fixed cost (checkpoints, commits, the stage
// loops of a partition with few records). At the end the outputs are the
// model's and every committed offset is at its log end. Opt-in
// (DIFFERENTIAL_SCALE_BENCH=1, a real broker); the counts are
// DIFFERENTIAL_SCALE_PARTITIONS (default 8,192), the rate
// DIFFERENTIAL_SCALE_RATE (records a second, default 2000), the window
// 60 s.
func TestPartitionSteadyCPU(t *testing.T) {
	if os.Getenv("DIFFERENTIAL_SCALE_BENCH") == "" || os.Getenv("DIFFERENTIAL_TEST_BROKERS") == "" {
		t.Skip("the partition-count benchmark: set DIFFERENTIAL_SCALE_BENCH=1 and DIFFERENTIAL_TEST_BROKERS (a real broker; docs/testing.md)")
	}
	counts := []int{8, 192}
	if s := os.Getenv("DIFFERENTIAL_SCALE_PARTITIONS"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "DIFFERENTIAL_SCALE_PARTITIONS")
			counts = append(counts, n)
		}
	}
	rate := 2000
	if s := os.Getenv("DIFFERENTIAL_SCALE_RATE"); s != "" {
		var err error
		rate, err = strconv.Atoi(s)
		require.NoError(t, err, "DIFFERENTIAL_SCALE_RATE")
	}
	const window = 60 * time.Second
	bin := buildCLI(t)
	var table strings.Builder
	table.WriteString("| partitions | records/s | per partition | records in the window | CPU s | CPU µs per record | lag at the window's end |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range counts {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			f := newFleet(t, bin, "steady", n, "sticky", true, "--commit-interval", "1s", "--buffer-budget", "1572864")
			wc := f.workload(rate*int(3*window/time.Second), workload.DefaultConfig().Users, 73)
			f.cfg.IdleTimeout = 10 * time.Minute
			recs := workload.Generate(wc)
			tr := newTracker()
			sl := &sessionLog{sessions: map[*member][]session{}}
			f.onLine = func(m *member, line string, at time.Time) {
				sl.line(m, line, at)
				tr.line(m, line, at)
			}
			client, err := sarama.NewClient(f.b.Addrs(), f.b.Config())
			require.NoError(t, err)
			defer client.Close()
			adm, err := sarama.NewClusterAdminFromClient(client)
			require.NoError(t, err)

			// The stream first, so that every partition has a record when a starts.
			stop := stream(t, f, recs, rate)
			for deadline := time.Now().Add(time.Minute); ; {
				empty := 0
				for p := range n {
					o, err := client.GetOffset(f.in, int32(p), sarama.OffsetNewest)
					require.NoError(t, err)
					if o == 0 {
						empty++
					}
				}
				if empty == 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "%d partitions without a record after a minute", empty)
				<-time.After(100 * time.Millisecond) // polls the brokers; the bound is the deadline
			}
			at := time.Now()
			a := f.start(t, "a")
			// Every partition started (f.parts belongs to the stream:
			// every partition counts as holding a record).
			for {
				tr.mu.Lock()
				started := 0
				for p := range n {
					for _, s := range tr.events[int32(p)] {
						if s.start && s.m == a {
							started++
							break
						}
					}
				}
				ch := tr.changed
				tr.mu.Unlock()
				if started == n {
					break
				}
				select {
				case <-ch:
				case err := <-a.exited:
					t.Fatalf("a exited: %v\n%s", err, a.logs.String())
				case <-time.After(3 * time.Minute):
					t.Fatalf("a started %d of %d partitions within 3 minutes", started, n)
				}
			}
			t.Logf("every partition started after %v", time.Since(at))
			// A warm-up of 10 s, then the window.
			time.Sleep(10 * time.Second) // the measured window is by the clock
			c0, e0 := cpuTicks(t, a), inputEnd(t, client, f)
			time.Sleep(window) // the measured window is by the clock
			c1, e1 := cpuTicks(t, a), inputEnd(t, client, f)
			ps := make([]int32, n)
			for i := range ps {
				ps[i] = int32(i)
			}
			off, err := adm.ListConsumerGroupOffsets(f.group, map[string][]int32{f.in: ps})
			require.NoError(t, err)
			var committed int64
			for _, p := range ps {
				if blk := off.GetBlock(f.in, p); blk != nil && blk.Offset > 0 {
					committed += blk.Offset
				}
			}
			cpu := time.Duration(c1-c0) * time.Second / 100 // USER_HZ
			recsIn := e1 - e0
			fmt.Fprintf(&table, "| %d | %d | %.1f | %d | %.1f | %.1f | %d |\n", n, rate, float64(rate)/float64(n), recsIn,
				cpu.Seconds(), float64(cpu.Microseconds())/float64(recsIn), e1-committed)
			stop()
			f.sentinels(t)
			f.waitCovered(t, 0, "everything")
			f.stop(t, a)
			f.b.WaitStable(t, f.out)
			f.b.WaitStable(t, f.dlq)
			f.verify(t)
		})
	}
	t.Logf("steady CPU:\n%s", table.String())
}
