package commit

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files in testdata/ hold metadata strings of every version with what
// they decode to, and strings near them (one character changed, inserted or
// deleted, the version tag swapped, truncated) with whether they decode and
// to what. They are the compatibility promise in bytes: every string a group
// may have committed must keep decoding to the same state, and every state
// must keep encoding to the same string.
var updateFixtures = flag.Bool("update", false, "rewrite commit/testdata/*.jsonl from the current codec")

// fixture is one line of a testdata file.
type fixture struct {
	Offset   int64    `json:"offset"`
	Stages   []string `json:"stages"`
	Metadata string   `json:"metadata"`
	// OK is whether Metadata decodes for Stages at Offset; when it does,
	// Checkpoints and Changelog are what it decodes to.
	OK          bool           `json:"ok"`
	Checkpoints []fixtureStage `json:"checkpoints,omitempty"`
	Changelog   int64          `json:"changelog,omitempty"`
	Idle        []fixtureIdle  `json:"idle,omitempty"`
}

type fixtureIdle struct {
	Stage           string `json:"stage"`
	After           int64  `json:"after"`
	LeaderNext      int64  `json:"leader_next"`
	LeaderWatermark int64  `json:"leader_watermark,omitempty"`
}

type fixtureStage struct {
	Next      int64   `json:"next"`
	Watermark int64   `json:"watermark,omitempty"`
	Above     []int64 `json:"above,omitempty"`
}

func (f fixture) state() State {
	st := State{Changelog: f.Changelog}
	for i, s := range f.Checkpoints {
		st.Stages = append(st.Stages, Checkpoint{Stage: f.Stages[i], Next: s.Next, Watermark: s.Watermark, Above: s.Above})
	}
	for _, r := range f.Idle {
		st.Idle = append(st.Idle, IdleRelease(r))
	}
	return st
}

func newFixture(md string, offset int64, stages []string) fixture {
	f := fixture{Offset: offset, Stages: stages, Metadata: md}
	st, ok := DecodeState(md, offset, stages)
	f.OK = ok
	if ok {
		f.Changelog = st.Changelog
		for _, cp := range st.Stages {
			f.Checkpoints = append(f.Checkpoints, fixtureStage{Next: cp.Next, Watermark: cp.Watermark, Above: cp.Above})
		}
		for _, r := range st.Idle {
			f.Idle = append(f.Idle, fixtureIdle(r))
		}
	}
	return f
}

var fixtureFiles = []string{"v1.jsonl", "v2.jsonl", "v3.jsonl", "v4.jsonl", "near.jsonl"}

// TestMetadataTestdata decodes every string in testdata/ and re-encodes
// every state that decodes: both must give what the file records.
func TestMetadataTestdata(t *testing.T) {
	if *updateFixtures {
		writeFixtures(t)
	}
	for _, name := range fixtureFiles {
		t.Run(name, func(t *testing.T) {
			fs := readFixtures(t, filepath.Join("testdata", name))
			require.NotEmpty(t, fs)
			valid := 0
			for i, f := range fs {
				st, ok := DecodeState(f.Metadata, f.Offset, f.Stages)
				require.Equal(t, f.OK, ok, "line %d: decode %q", i+1, f.Metadata)
				if !f.OK {
					continue
				}
				valid++
				want := f.state()
				require.Equal(t, want, st, "line %d: decode %q", i+1, f.Metadata)
				md, err := EncodeState(f.Offset, want)
				require.NoError(t, err, "line %d", i+1)
				require.Equal(t, f.Metadata, md, "line %d: re-encode", i+1)
				cps, ok := DecodeMetadata(f.Metadata, f.Offset, f.Stages)
				require.True(t, ok, "line %d", i+1)
				require.Equal(t, want.Stages, cps, "line %d", i+1)
				if want.Changelog == NoChangelog && len(want.Idle) == 0 {
					md, err := EncodeMetadata(f.Offset, want.Stages)
					require.NoError(t, err, "line %d", i+1)
					require.Equal(t, f.Metadata, md, "line %d: EncodeMetadata", i+1)
				}
				if name != "near.jsonl" {
					require.True(t, strings.HasPrefix(f.Metadata, "dfl"+name[1:2]+":"), "line %d: %q in %s", i+1, f.Metadata, name)
				}
			}
			if name != "near.jsonl" {
				require.Equal(t, len(fs), valid, "every line of %s decodes", name)
			}
		})
	}
}

func readFixtures(t *testing.T, path string) []fixture {
	t.Helper()
	file, err := os.Open(path)
	require.NoError(t, err)
	defer file.Close()
	var fs []fixture
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var f fixture
		require.NoError(t, json.Unmarshal(sc.Bytes(), &f), "%s:%d", path, len(fs)+1)
		fs = append(fs, f)
	}
	require.NoError(t, sc.Err())
	return fs
}

// fixtureStates returns the states the valid files hold: hand-picked edges
// and seeded random ones, for version v.
func fixtureStates(v int) (offsets []int64, states []State) {
	r := rand.New(rand.NewPCG(29, uint64(v)))
	add := func(offset int64, st State) {
		offsets = append(offsets, offset)
		states = append(states, st)
	}
	changelog := func() int64 {
		switch v {
		case 1:
			return NoChangelog
		case 2:
			return r.Int64N(math.MaxInt64) >> r.IntN(64)
		default:
			if r.IntN(2) == 0 {
				return NoChangelog
			}
			return r.Int64N(math.MaxInt64) >> r.IntN(64)
		}
	}
	edges := []struct {
		offset int64
		cps    []Checkpoint
	}{
		{0, checkpoints(chainStages, 0, 0, 0, 0, 0, 0)},
		{1000, checkpoints(chainStages, 1042, 1795946400000000000, 1003, 0, 1000, -1)},
		{7, checkpoints([]string{"only"}, 9, 1)},
		{5, checkpoints(chainStages, 5, -1, 6, math.MinInt64, 7, -36)},
		{0, checkpoints(chainStages, math.MaxInt64-1<<20, math.MaxInt64, 0, math.MinInt64, 1, 0)},
		{3, checkpoints([]string{"a,b", "c:d.e;c", ""}, 3, 0, 4, 0, 5, 0)},
	}
	for _, e := range edges {
		st := State{Stages: e.cps, Changelog: changelog()}
		if v == 4 {
			st.Idle = edgeIdle(e.offset, st.Stages)
		}
		if v == 3 || v == 4 && e.offset%2 == 1 {
			st.Stages[0].Above = []int64{st.Stages[0].Next + 1}
			if last := len(st.Stages) - 1; last > 0 {
				st.Stages[last].Above = []int64{st.Stages[last].Next}
			}
		}
		add(e.offset, st)
	}
	if v == 2 {
		add(1000, State{Stages: checkpoints(chainStages, 1042, 1795946400000000000, 1003, 0, 1000, -1), Changelog: 0})
	}
	for k := range 80 {
		n := 1 + r.IntN(MaxStages)
		if v == 4 {
			n = 1 + r.IntN(27)
		}
		if v == 3 {
			n = 1 + r.IntN(6)
		}
		stages := make([]string, n)
		for j := range stages {
			stages[j] = fmt.Sprintf("s%d-%d", j, r.IntN(1000))
		}
		offset := randOffset(r) >> r.IntN(40)
		if offset > math.MaxInt64-1<<42 {
			offset = 0
		}
		// A few sets as wide as any can be; the others short, to keep the
		// files small.
		span := min(fixtureSpan(v, n), 8<<r.IntN(4))
		if k%20 == 0 {
			span = fixtureSpan(v, n)
		}
		st := State{Changelog: changelog()}
		for _, s := range stages {
			cp := Checkpoint{Stage: s, Next: offset + r.Int64N(1<<40)>>r.IntN(40)}
			if r.IntN(4) != 0 {
				cp.Watermark = int64(r.Uint64()) >> r.IntN(64)
			}
			if (v == 3 || v == 4 && n <= 6) && r.IntN(2) == 0 {
				cp.Above = randAbove(r, cp.Next, span)
			}
			st.Stages = append(st.Stages, cp)
		}
		if v == 3 && !hasAbove(st.Stages) {
			i := r.IntN(n)
			st.Stages[i].Above = randAbove(r, st.Stages[i].Next, span)
			if len(st.Stages[i].Above) == 0 {
				st.Stages[i].Above = []int64{st.Stages[i].Next + 3}
			}
		}
		for i := range st.Stages {
			if len(st.Stages[i].Above) == 0 {
				st.Stages[i].Above = nil
			}
		}
		if v == 4 {
			st.Idle = randIdle(r, offset, st.Stages)
		}
		add(offset, st)
	}
	return offsets, states
}

// fixtureSpan is the widest above set of the fixtures of version v for n
// stages: MaxAboveSpan, and for the files written before version 4 the
// span it had then (without room for idle releases), so that they are
// written again byte for byte.
func fixtureSpan(v, n int) int {
	if v >= 4 {
		return MaxAboveSpan(n)
	}
	fixed := tagLen + hashLen + 1 + n*maxStageLen - 1 + maxChangelogLen
	per := (MaxMetadataLen-fixed)/n - aboveOverhead
	if per <= 0 {
		return 0
	}
	return per * 3 / 4 * 8
}

// edgeIdle is an edge case's idle releases: one per stage after the
// first, up to IdleReleaseCap, at and just above the committed offset,
// with a leader just past it or far ahead.
func edgeIdle(offset int64, cps []Checkpoint) []IdleRelease {
	var rs []IdleRelease
	for i := 1; i < len(cps) && len(rs) < IdleReleaseCap(len(cps)); i++ {
		r := IdleRelease{Stage: cps[i].Stage, After: offset + int64(i-1), LeaderNext: offset + int64(i)}
		if i == 2 {
			r.LeaderNext, r.LeaderWatermark = offset+1<<40, -1
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		rs = append(rs, IdleRelease{Stage: cps[0].Stage, After: offset, LeaderNext: offset + 1, LeaderWatermark: 1795946400000000000})
	}
	return rs
}

// randIdle returns 1 to IdleReleaseCap idle releases above offset.
func randIdle(r *rand.Rand, offset int64, cps []Checkpoint) []IdleRelease {
	n := 1 + r.IntN(IdleReleaseCap(len(cps)))
	rs := make([]IdleRelease, n)
	after := offset
	for k := range rs {
		after += r.Int64N(1<<30) >> r.IntN(30)
		if k > 0 {
			after++
		}
		rs[k] = IdleRelease{Stage: cps[r.IntN(len(cps))].Stage, After: after, LeaderNext: after + 1 + r.Int64N(1<<20)>>r.IntN(20)}
		if r.IntN(4) != 0 {
			rs[k].LeaderWatermark = int64(r.Uint64()) >> r.IntN(64)
		}
	}
	return rs
}

// near returns strings one edit away from md.
func near(r *rand.Rand, md string) []string {
	const alphabet = "0123456789abcdefxyz.,;:=_-rbcA"
	var out []string
	for range 6 {
		i := r.IntN(len(md))
		c := alphabet[r.IntN(len(alphabet))]
		switch r.IntN(3) {
		case 0:
			out = append(out, md[:i]+string(c)+md[i+1:])
		case 1:
			out = append(out, md[:i]+string(c)+md[i:])
		default:
			out = append(out, md[:i]+md[i+1:])
		}
	}
	for _, tag := range []string{"dfl1:", "dfl2:", "dfl3:", "dfl4:"} {
		if !strings.HasPrefix(md, tag) {
			out = append(out, tag+md[len(tag):])
		}
	}
	out = append(out, md[:r.IntN(len(md))], md+";c1", md+";a0=r0")
	if strings.HasPrefix(md, "dfl4:") {
		out = append(out, md+";i0=0.0", strings.Replace(md, ";i", ";a0=r0;i", 1))
	}
	return out
}

func writeFixtures(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 0))
	var nearBy []fixture
	for v := 1; v <= 4; v++ {
		var lines []fixture
		offsets, states := fixtureStates(v)
		for i, st := range states {
			md, err := EncodeState(offsets[i], st)
			require.NoError(t, err)
			stages := stageNames(st.Stages)
			f := newFixture(md, offsets[i], stages)
			require.True(t, f.OK, "%q", md)
			lines = append(lines, f)
			if i%8 == 0 {
				for _, m := range near(r, md) {
					nearBy = append(nearBy, newFixture(m, offsets[i], stages))
				}
			}
		}
		writeFixtureFile(t, fmt.Sprintf("v%d.jsonl", v), lines)
	}
	writeFixtureFile(t, "near.jsonl", nearBy)
}

func writeFixtureFile(t *testing.T, name string, fs []fixture) {
	var b strings.Builder
	for _, f := range fs {
		line, err := json.Marshal(f)
		require.NoError(t, err)
		b.Write(line)
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(filepath.Join("testdata", name), []byte(b.String()), 0o644))
}
