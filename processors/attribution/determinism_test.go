package attribution_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// detIdle is the idle timeout of the determinism runs: the input pauses
// for longer than it every few bursts, so followers are released by
// idleness at the live tail.
const detIdle = 200 * time.Millisecond

// detInput is the workload of the determinism runs (a lateness of two
// minutes, so that a click after an install in the log can still win it:
// what an idle release cuts off).
func detInput() (attribution.Config, [][]chain.Record) {
	wc := workload.DefaultConfig()
	wc.Records, wc.Partitions, wc.Users, wc.Seed = 3000, 2, 150, 26
	wc.Span = 3 * time.Hour
	wc.MaxRecordBytes = 4096
	wc.LateClickFrac = 0.3
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = wc.MaxRecordBytes
	cfg.Lateness = 2 * time.Minute
	cfg.IdleTimeout = detIdle
	return cfg, workload.Split(workload.Generate(wc), wc.Partitions)
}

// stamper gives records the timestamps a LogAppendTime topic would: the
// (fake) time they are appended at, shifted past every event time of the
// workload so no record is too far ahead of its own timestamp.
type stamper struct{ shift time.Duration }

func newStamper() stamper {
	return stamper{shift: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Sub(time.Now())}
}

func (s stamper) now() time.Time { return time.Now().Add(s.shift) }

// detRun is one way of processing the input.
type detRun struct {
	name string
	// live: streamed in bursts with pauses; otherwise appended at once (a
	// backlog: a new group reading from offset 0).
	live bool
	// exactlyOnce: exactly-once mode, with a transaction commit failing now and
	// then (an abort and a rewind of the cycle's releases).
	exactlyOnce bool
	// moves: the partitions move between instances mid-run (a restart).
	moves bool
}

// streamDet appends every partition's records: live, in bursts of 25
// records 10 ms apart, with a pause of 1 s after every second burst (then
// a follower waiting for a late click is released by idleness), each
// record stamped as it is appended; or all at once with the given stamps.
func streamDet(tt *chaintest.Tester, parts [][]chain.Record, live bool, st stamper, between func(burst int)) {
	if !live {
		for p := range parts {
			tt.Append(int32(p), parts[p]...)
		}
		return
	}
	const burst = 10
	for b := 0; ; b++ {
		any := false
		for p := range parts {
			lo := b * burst
			if lo >= len(parts[p]) {
				continue
			}
			any = true
			hi := min(lo+burst, len(parts[p]))
			recs := make([]chain.Record, hi-lo)
			copy(recs, parts[p][lo:hi])
			for i := range recs {
				recs[i].Timestamp = st.now()
			}
			tt.Append(int32(p), recs...)
		}
		if !any {
			return
		}
		if b%2 == 1 {
			time.Sleep(time.Second)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
		if between != nil {
			between(b)
		}
	}
}

// runDet processes parts one way and returns the partitions' logs as the
// engine saw them (with their timestamps), the outputs and the idle
// releases counted.
func runDet(t *testing.T, cfg attribution.Config, parts [][]chain.Record, r detRun) (logs [][]chain.Record, outputs []chain.Message, idles int64) {
	w := attribution.Wiring{}
	tt := chaintest.NewWith(t, func(o ...chain.Option) (*chain.Chain, error) { return attribution.NewChainWith(cfg, w, o...) },
		chain.WithIdleTimeout(detIdle), chain.WithCommitInterval(50*time.Millisecond))
	tt.UseChangelog()
	var x *chaintest.Transactor
	if r.exactlyOnce {
		x = tt.UseTransactions()
	}
	ps := make([]int32, len(parts))
	for p := range parts {
		ps[p] = int32(p)
	}
	countIdles := func() {
		for _, s := range tt.Stats() {
			for _, ss := range s.Stages {
				idles += ss.IdleReleases
			}
		}
	}
	tt.StartOn("a", ps...)
	instances := []string{"b", "a", "c"}
	streamDet(tt, parts, r.live, newStamper(), func(b int) {
		switch {
		case r.exactlyOnce && b%15 == 2:
			x.FailCommits(1)
		case r.moves && b%25 == 5:
			countIdles()
			require.NoError(t, tt.Move(instances[(b/25)%len(instances)], ps...))
		}
	})
	tt.WaitIdle()
	for p := range parts {
		tt.WaitCommitted(int32(p), int64(len(parts[p])))
	}
	countIdles()
	require.NoError(t, tt.Stop())
	if r.exactlyOnce {
		_, aborts := x.Counts()
		require.Positive(t, aborts, "%s: some cycles aborted and rewound", r.name)
	}
	logs = make([][]chain.Record, len(parts))
	for p := range parts {
		logs[p] = tt.Log(int32(p)).Records()
	}
	return logs, tt.Outputs("output"), idles
}

// byInput indexes outputs by their input record (partition, offset); a
// second, different copy of one is a conflicting duplicate.
func byInput(t *testing.T, name string, outs []chain.Message) map[string][]byte {
	m := map[string][]byte{}
	for _, o := range reference.FromMessages(outs) {
		src, ok := o.Header(attribution.SourceHeader)
		require.True(t, ok, "%s: output without its source header", name)
		if prev, dup := m[string(src)]; dup {
			require.True(t, bytes.Equal(prev, o.Value), "%s: conflicting outputs for input %s:\n%s\n%s", name, src, prev, o.Value)
		}
		m[string(src)] = o.Value
	}
	return m
}

// TestOutputsAreAFunctionOfTheLog processes one input four ways — live
// with pauses longer than the idle timeout (followers are released by
// idleness at the tail), live with the partitions moving between
// instances mid-run, live in exactly-once mode with transactions failing
// (aborts rewind the cycles' releases), and as a backlog from offset 0 in
// a new group (no pause at all while it is read) — and requires the same
// outputs, record for record, from all of them and from the reference
// model with the same idle timeout. The log's timestamps are the append
// times (as LogAppendTime gives), carried over to the backlog run.
func TestOutputsAreAFunctionOfTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, parts := detInput()
		liveLogs, liveOut, idles := runDet(t, cfg, parts, detRun{name: "live", live: true})
		require.Positive(t, idles, "the pauses released followers by idleness")
		want := byInput(t, "live", liveOut)

		_, movedOut, _ := runDet(t, cfg, parts, detRun{name: "moves", live: true, moves: true})
		_, exactlyOnceOut, _ := runDet(t, cfg, parts, detRun{name: "exactly-once", live: true, exactlyOnce: true})
		// The backlog: the very log the live run read, timestamps included.
		_, backOut, _ := runDet(t, cfg, liveLogs, detRun{name: "backlog"})
		for _, run := range []struct {
			name string
			outs []chain.Message
		}{{"moves", movedOut}, {"exactly-once", exactlyOnceOut}, {"backlog from offset 0", backOut}} {
			got := byInput(t, run.name, run.outs)
			require.Equal(t, len(want), len(got), "%s: outputs", run.name)
			diff := 0
			for k, v := range want {
				if !bytes.Equal(got[k], v) {
					if diff < 3 {
						t.Errorf("%s: input %s: live %s, %s %s", run.name, k, v, run.name, got[k])
					}
					diff++
				}
			}
			require.Zero(t, diff, "%s: outputs that differ from the live run's", run.name)
		}

		model := reference.Expect(liveLogs, cfg)
		rep := model.Check(reference.FromMessages(liveOut), nil,
			reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
		require.Zero(t, rep.Installs.Mismatched+rep.Purchases.Mismatched+rep.Installs.Missing+rep.Purchases.Missing, rep.Summary())

		// The rule matters: without it the model attributes differently.
		noGaps := cfg
		noGaps.IdleTimeout = 0
		other := reference.Expect(liveLogs, noGaps).Check(reference.FromMessages(liveOut), nil,
			reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
		require.Positive(t, other.Installs.Mismatched, "some installs depend on the idle releases: %s", other.Summary())
		t.Logf("%d outputs; %d idle releases live; %d installs differ from a model without the release rule", len(want), idles, other.Installs.Mismatched)
	})
}
