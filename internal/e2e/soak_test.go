package e2e_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// The soak tests run `differential run` fleets on a real cluster for
// minutes; they are skipped unless DIFFERENTIAL_SOAK=1.
const envSoak = "DIFFERENTIAL_SOAK"

// soakLateness is the members' --lateness: an install waits until its
// click stage has read six hours of event time past it, so at any moment
// many installs wait in the key gate while later records complete.
const soakLateness = 6 * time.Hour

// soakIdle is the members' --idle-timeout, and the model's: longer than
// any gap between the generator's records' timestamps (minutes to hours)
// and than the time from the last one to now, so that no build releases a
// follower early — neither this one, which decides over the log, nor an
// older one that decided by the wall clock — and an old binary's outputs
// are comparable with the model's. The sentinels end every soak.
const soakIdle = 60 * 24 * time.Hour

// newSoakFleet is testFleet's set-up with a late-heavy workload and
// --lateness soakLateness.
func newSoakFleet(t *testing.T, partitions, records int, bin string) (*fleet, []workload.Record) {
	t.Helper()
	// DIFFERENTIAL_SOAK_FLAGS: more `run` flags, e.g. "--key-concurrency 8".
	extra := append([]string{"--lateness", soakLateness.String(), "--idle-timeout", soakIdle.String()}, strings.Fields(os.Getenv("DIFFERENTIAL_SOAK_FLAGS"))...)
	f := newFleet(t, bin, "soak", partitions, "sticky", false, extra...)
	wc := f.workload(records, 3000, 77)
	wc.LateClickFrac = 0.3
	f.cfg.Lateness = soakLateness
	f.cfg.IdleTimeout = soakIdle // the members' --idle-timeout, for the model's horizons
	return f, workload.Generate(wc)
}

// metaWatch samples the group's committed metadata and counts the commits
// that carried offsets completed above a stage's position (version 3).
type metaWatch struct {
	mu       sync.Mutex
	samples  int
	v3       int // samples of a partition whose metadata was dfl3
	maxAbove int // largest set seen, in offsets
	last     map[int32]string
	stop     func()
}

func watchMetadata(t *testing.T, f *fleet) *metaWatch {
	t.Helper()
	adm, err := sarama.NewClusterAdmin(f.b.Addrs(), f.b.Config())
	require.NoError(t, err)
	names := stageNames(f.cfg)
	w := &metaWatch{last: map[int32]string{}}
	ps := make([]int32, f.partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(150 * time.Millisecond): // a sampling period, not a wait for a condition
			}
			off, err := adm.ListConsumerGroupOffsets(f.group, map[string][]int32{f.in: ps})
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, p := range ps {
				blk := off.GetBlock(f.in, p)
				if blk == nil || blk.Offset < 0 {
					continue
				}
				w.samples++
				w.last[p] = blk.Metadata
				if !beyondV2(blk.Metadata) {
					continue
				}
				w.v3++
				if st, ok := commit.DecodeState(blk.Metadata, blk.Offset, names); ok {
					for _, cp := range st.Stages {
						w.maxAbove = max(w.maxAbove, len(cp.Above))
					}
				}
			}
			w.mu.Unlock()
		}
	}()
	w.stop = func() { close(done); <-stopped; _ = adm.Close() }
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			w.stop()
		}
	})
	return w
}

func (w *metaWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, md := range w.last {
		if beyondV2(md) {
			n++
		}
	}
	return fmt.Sprintf("metadata samples %d, dfl3 %d, largest set %d, partitions at dfl3 now %d", w.samples, w.v3, w.maxAbove, n)
}

func stageNames(cfg attribution.Config) []string {
	st := attribution.Chain(cfg)
	names := make([]string, len(st))
	for i, s := range st {
		names[i] = s.Name
	}
	return names
}

// committedV3 returns how many partitions' committed metadata is dfl3 now.
func committedV3(t *testing.T, f *fleet) (v3, above int) {
	t.Helper()
	adm, err := sarama.NewClusterAdmin(f.b.Addrs(), f.b.Config())
	require.NoError(t, err)
	defer adm.Close()
	ps := make([]int32, f.partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	off, err := adm.ListConsumerGroupOffsets(f.group, map[string][]int32{f.in: ps})
	require.NoError(t, err)
	names := stageNames(f.cfg)
	for _, p := range ps {
		blk := off.GetBlock(f.in, p)
		if blk == nil || !beyondV2(blk.Metadata) {
			continue
		}
		v3++
		st, ok := commit.DecodeState(blk.Metadata, blk.Offset, names)
		require.True(t, ok, "partition %d: dfl3 metadata %q does not decode", p, blk.Metadata)
		for _, cp := range st.Stages {
			above += len(cp.Above)
		}
	}
	return v3, above
}

// requireNoRepeat checks the outputs so far: none different from the
// model's, none repeated.
func requireNoRepeat(t *testing.T, f *fleet, what string) {
	t.Helper()
	r := f.check(t, reference.NoDuplicates)
	o := r.Outputs()
	require.Zero(t, o.Mismatched+o.Unexpected+r.DeadLetters.Mismatched+r.DeadLetters.Unexpected, "%s: %s", what, r.Summary())
	require.Zero(t, o.IdenticalDuplicates+o.ConflictingDuplicates+r.DeadLetters.IdenticalDuplicates+r.DeadLetters.ConflictingDuplicates,
		"%s: clean stops repeat nothing: %s", what, r.Summary())
	require.Zero(t, r.OrderViolations+r.Unattributable, "%s: %s", what, r.Summary())
	t.Logf("%s: %d outputs, %d dead letters, no repeat", what, o.Distinct(), r.DeadLetters.Distinct())
}

// TestSoakKeyGateFleet: at-least-once, key gate, --lateness 6h, 16
// partitions, a late-heavy stream; members are stopped with SIGTERM
// mid-stream several times (no output may repeat), one is SIGKILLed
// (repeats only byte-identical, nothing lost), members join again; every
// output is the model's. It reports how often the committed metadata
// carried offsets completed above a position (dfl3).
func TestSoakKeyGateFleet(t *testing.T) {
	t.Parallel()
	if os.Getenv(envSoak) != "1" {
		t.Skip("set " + envSoak + "=1 (and DIFFERENTIAL_TEST_BROKERS) to run the soak")
	}
	const partitions, records, slices = 16, 48_000, 12
	f, recs := newSoakFleet(t, partitions, records, buildCLI(t))
	slice := func(i int) []workload.Record { return recs[i*len(recs)/slices : (i+1)*len(recs)/slices] }
	w := watchMetadata(t, f)
	const margin = 400

	a, b, c := f.growToThree(t, slice, margin)

	// Clean stops mid-stream, each right after a slice was sent, and a
	// new member each time.
	live := []*member{a, b, c}
	for i, name := range []string{"d", "e", "f"} {
		f.produce(t, slice(4+i))
		victim := live[0]
		live = live[1:]
		f.stop(t, victim)
		v3, above := committedV3(t, f)
		t.Logf("after SIGTERM of %s: %d partitions commit dfl3 carrying %d offsets; %s", victim.name, v3, above, w)
		m := f.start(t, name)
		live = append(live, m)
		f.waitStarted(t, m)
		f.waitCovered(t, margin, "after the stop of "+victim.name)
		requireNoRepeat(t, f, "after the clean stop of "+victim.name)
	}

	// A SIGKILL mid-stream, and a member joins.
	f.produce(t, slice(7))
	f.kill(t, live[0])
	live = live[1:]
	g := f.start(t, "g")
	live = append(live, g)
	f.produce(t, slice(8))
	f.waitStarted(t, g)
	for i := 9; i < slices; i++ {
		f.produce(t, slice(i))
	}
	f.sentinels(t)
	f.waitCovered(t, 0, "everything")
	for _, m := range live {
		f.stop(t, m)
	}
	w.stop()
	t.Logf("%s", w)
	f.verify(t)
}

// newOldBinarySoak is the set-up of the soak tests that mix the binary
// before dfl3 (DIFFERENTIAL_OLD_BIN) with this one: skipped unless both
// are given; a 12-partition fleet of 24,000 records whose members run the
// old binary (oldBin), the input cut into slices slices (slice(i)), and
// this binary built (newBin).
func newOldBinarySoak(t *testing.T, slices int) (f *fleet, slice func(int) []workload.Record, oldBin, newBin string) {
	t.Helper()
	old := os.Getenv("DIFFERENTIAL_OLD_BIN")
	if os.Getenv(envSoak) != "1" || old == "" {
		t.Skip("set " + envSoak + "=1 and DIFFERENTIAL_OLD_BIN=<differential built from ae0c1f7>")
	}
	const partitions, records = 12, 24_000
	newBin = buildCLI(t)
	f, recs := newSoakFleet(t, partitions, records, old)
	slice = func(i int) []workload.Record { return recs[i*len(recs)/slices : (i+1)*len(recs)/slices] }
	return f, slice, old, newBin
}

// TestSoakUpgradeDowngrade runs one member on one state directory: the
// binary before dfl3 (DIFFERENTIAL_OLD_BIN), then this one (upgrade), then
// — after this one stopped with offsets completed above a position in the
// commit metadata — the old one again (downgrade), and checks every
// output against the model.
func TestSoakUpgradeDowngrade(t *testing.T) {
	t.Parallel()
	const slices = 12
	f, slice, old, newBin := newOldBinarySoak(t, slices)
	const margin = 400

	f.produce(t, slice(0))
	f.produce(t, slice(1))
	m := f.start(t, "m")
	f.waitCovered(t, margin, "old binary")
	f.produce(t, slice(2))
	f.stop(t, m)
	requireNoRepeat(t, f, "old binary, clean stop")

	// Upgrade; stop mid-stream until a commit carries a set.
	f.bin = newBin
	next := 3
	for {
		m = f.start(t, "m")
		f.waitStarted(t, m)
		f.waitCovered(t, margin, "new binary")
		f.produce(t, slice(next))
		next++
		f.stop(t, m)
		requireNoRepeat(t, f, "upgrade, clean stop")
		v3, above := committedV3(t, f)
		t.Logf("new binary stopped: %d partitions commit dfl3 carrying %d offsets", v3, above)
		if v3 > 0 || next == 8 {
			require.Positive(t, v3, "no commit carried a set: the downgrade is not exercised")
			break
		}
	}

	// One run of this binary that writes no dfl3 before the downgrade:
	// in exactly-once mode (DIFFERENTIAL_DOWNGRADE_VIA_EOS=1) or in the
	// compatibility mode (DIFFERENTIAL_DOWNGRADE_VIA_COMPAT=1, --metadata-version 2:
	// the admission step, no sets carried but the restored ones still above
	// a position). Does it leave dfl1/dfl2?
	var via []string
	switch {
	case os.Getenv("DIFFERENTIAL_DOWNGRADE_VIA_EOS") == "1":
		via = []string{"--guarantee", "exactly-once"}
	case os.Getenv("DIFFERENTIAL_DOWNGRADE_VIA_COMPAT") == "1":
		via = []string{"--metadata-version", "2"}
	}
	if via != nil {
		extra := f.extra
		f.extra = append(append([]string(nil), extra...), via...)
		m = f.start(t, "m")
		f.waitStarted(t, m)
		f.produce(t, slice(next))
		next++
		f.waitCovered(t, margin, "new binary, "+strings.Join(via, " "))
		f.stop(t, m)
		requireNoRepeat(t, f, "new binary "+strings.Join(via, " ")+", clean stop")
		f.extra = extra
		v3, above := committedV3(t, f)
		t.Logf("new binary stopped with %v: %d partitions commit dfl3 carrying %d offsets", via, v3, above)
		require.Zero(t, v3, "a run with %v leaves no set in the metadata", via)
	}

	// Downgrade: on another instance (a partition moving to an old member
	// of a mixed fleet), or on the same state directory with
	// DIFFERENTIAL_DOWNGRADE_SAME_DIR=1.
	f.bin = old
	name := "old-instance"
	if os.Getenv("DIFFERENTIAL_DOWNGRADE_SAME_DIR") == "1" {
		name = "m"
	}
	m = f.start(t, name)
	f.waitStarted(t, m)
	for ; next < slices; next++ {
		f.produce(t, slice(next))
	}
	f.sentinels(t)
	f.waitCovered(t, 0, "old binary after the downgrade")
	f.stop(t, m)
	r := f.check(t, reference.IdenticalDuplicates)
	o := r.Outputs()
	t.Logf("after the downgrade: %s", r.Summary())
	t.Logf("outputs %d distinct of %d, mismatched %d, unexpected %d, repeated %d identical %d conflicting",
		o.Distinct(), o.Want, o.Mismatched, o.Unexpected, o.IdenticalDuplicates, o.ConflictingDuplicates)
	require.True(t, r.OK(), r.Summary())
}

// TestSoakMixedFleet is a member-by-member roll interrupted: two members
// of the binary before dfl3 (DIFFERENTIAL_OLD_BIN) run, one of this binary
// joins, then leaves cleanly: its partitions go back to old members.
func TestSoakMixedFleet(t *testing.T) {
	t.Parallel()
	const slices = 8
	f, slice, _, newBin := newOldBinarySoak(t, slices)
	const margin = 400

	f.produce(t, slice(0))
	f.produce(t, slice(1))
	a := f.start(t, "a")
	b := f.start(t, "b")
	f.waitStarted(t, a)
	f.waitStarted(t, b)
	f.waitCovered(t, margin, "old a, b")
	f.bin = newBin
	// DIFFERENTIAL_SOAK_NEW_FLAGS: flags for this binary's members only
	// (the old binary refuses flags it does not know), e.g.
	// "--metadata-version 2" for the first phase of a rolling upgrade.
	f.extra = append(f.extra, strings.Fields(os.Getenv("DIFFERENTIAL_SOAK_NEW_FLAGS"))...)
	c := f.start(t, "c")
	f.waitStarted(t, c)
	f.produce(t, slice(2))
	f.waitCovered(t, margin, "old a, b, new c")
	f.produce(t, slice(3))
	f.stop(t, c)
	v3, above := committedV3(t, f)
	t.Logf("new member c stopped: %d partitions commit dfl3 carrying %d offsets", v3, above)
	for i := 4; i < slices; i++ {
		f.produce(t, slice(i))
	}
	f.sentinels(t)
	f.waitCovered(t, 0, "old a, b after c left")
	f.stop(t, a)
	f.stop(t, b)
	r := f.check(t, reference.IdenticalDuplicates)
	o := r.Outputs()
	t.Logf("outputs %d distinct of %d, mismatched %d, unexpected %d, repeated %d identical %d conflicting",
		o.Distinct(), o.Want, o.Mismatched, o.Unexpected, o.IdenticalDuplicates, o.ConflictingDuplicates)
	require.True(t, r.OK(), r.Summary())
}

// beyondV2 reports whether md is of a version a binary before dfl3 cannot
// read: dfl3 (offsets carried above the positions) or dfl4 (recorded idle
// releases, and perhaps carried offsets too).
func beyondV2(md string) bool {
	return strings.HasPrefix(md, "dfl3:") || strings.HasPrefix(md, "dfl4:")
}
