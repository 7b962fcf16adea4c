package commit

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

func TestStateRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		stages := chainStages[:1+r.IntN(len(chainStages))]
		offset := randOffset(r)
		cps := make([]Checkpoint, len(stages))
		for j, s := range stages {
			cps[j] = Checkpoint{Stage: s, Next: offset + r.Int64N(math.MaxInt64-offset+1)>>r.IntN(64), Watermark: int64(r.Uint64()) >> r.IntN(64)}
		}
		st := State{Stages: cps, Changelog: NoChangelog}
		if r.IntN(4) != 0 {
			st.Changelog = randOffset(r)
		}
		md, err := EncodeState(offset, st)
		require.NoError(t, err, "case %d", i)
		require.LessOrEqual(t, len(md), MaxMetadataLen)
		got, ok := DecodeState(md, offset, stages)
		require.True(t, ok, "case %d: %q", i, md)
		require.Equal(t, st, got, "case %d", i)

		// DecodeMetadata reads both versions' positions.
		v1, ok := DecodeMetadata(md, offset, stages)
		require.True(t, ok, "case %d", i)
		require.Equal(t, cps, v1)
		if offset > 0 {
			_, ok = DecodeState(md, offset-1, stages)
			require.False(t, ok, "case %d: other offset", i)
		}
	}
}

// Version 2 is part of the compatibility promise, and version 1 keeps
// decoding (with no changelog offset) after the upgrade.
func TestStateGolden(t *testing.T) {
	cps := checkpoints(chainStages, 1042, 1795946400000000000, 1003, 0, 1000, -1)
	md, err := EncodeState(1000, State{Stages: cps, Changelog: 123456})
	require.NoError(t, err)
	assert.Equal(t, "dfl2:3fb71d28:16.dn7lv69i2v40,3,0.-1;c2n9c", md)

	v1, err := EncodeState(1000, State{Stages: cps, Changelog: NoChangelog})
	require.NoError(t, err)
	assert.Equal(t, "dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1", v1, "no changelog: version 1, unchanged")
	st, ok := DecodeState("dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1", 1000, chainStages)
	require.True(t, ok)
	assert.Equal(t, State{Stages: cps, Changelog: NoChangelog}, st)

	st, ok = DecodeState("dfl2:3fb71d28:16.dn7lv69i2v40,3,0.-1;c0", 1000, chainStages)
	require.True(t, ok)
	assert.Equal(t, int64(0), st.Changelog)
}

func TestDecodeStateForeign(t *testing.T) {
	valid, err := EncodeState(1000, State{Stages: checkpoints(chainStages, 1042, 77, 1003, 0, 1000, 0), Changelog: 500})
	require.NoError(t, err)
	_, ok := DecodeState(valid, 1000, chainStages)
	require.True(t, ok, "the base case decodes: the rejections below are meaningful")
	body := strings.TrimPrefix(valid[:strings.Index(valid, ";")], "dfl2:")

	for name, md := range map[string]string{
		"no changelog section":   "dfl2:" + body,
		"empty changelog":        "dfl2:" + body + ";c",
		"negative changelog":     "dfl2:" + body + ";c-1",
		"leading zero":           "dfl2:" + body + ";c0dw",
		"upper case":             "dfl2:" + body + ";cDW",
		"overflow":               "dfl2:" + body + ";c1y2p0ij32e8e8",
		"two changelog sections": valid + ";c1",
		"unknown section":        valid + ";b1",
		"unknown section only":   "dfl2:" + body + ";b1",
		"v1 tag with section":    strings.Replace(valid, "dfl2:", "dfl1:", 1),
		"future version":         strings.Replace(valid, "dfl2:", "dfl3:", 1),
		"trailing space":         valid + " ",
		"too long":               valid + strings.Repeat("0", MaxMetadataLen),
	} {
		st, ok := DecodeState(md, 1000, chainStages)
		assert.False(t, ok, "%s: %q", name, md)
		assert.Nil(t, st.Stages, name)
		_, ok = DecodeMetadata(md, 1000, chainStages)
		assert.False(t, ok, "DecodeMetadata %s", name)
	}
	_, ok = DecodeState(valid, 1000, []string{"click", "install", "buy"})
	assert.False(t, ok, "renamed stage")

	_, err = EncodeState(0, State{Stages: checkpoints([]string{"a"}, 0, 0), Changelog: -2})
	assert.ErrorIs(t, err, ErrInvalidCheckpoint)
}

func TestMaxStagesWithChangelog(t *testing.T) {
	cps := make([]Checkpoint, MaxStages)
	for i := range cps {
		cps[i] = Checkpoint{Stage: strings.Repeat("n", 50), Next: math.MaxInt64, Watermark: math.MinInt64}
	}
	md, err := EncodeState(0, State{Stages: cps, Changelog: math.MaxInt64})
	require.NoError(t, err, "MaxStages always fit, with the largest changelog offset too")
	assert.LessOrEqual(t, len(md), MaxMetadataLen)
}

func FuzzDecodeState(f *testing.F) {
	f.Add("dfl2:3fb71d28:16.dn7lv69i2v40,3,0.-1;c2n9c", int64(1000), uint64(3), int64(7))
	f.Add("dfl2:00000000:0,0;c0", int64(0), uint64(0), int64(0))
	f.Add("dfl3:00000000:0,0;c0;a1=r1_2.2j", int64(0), uint64(0), int64(0))
	f.Add("dfl3:00000000:0,0;a0=bTg", int64(0), uint64(0), int64(0))
	f.Fuzz(func(t *testing.T, md string, offset int64, d uint64, cl int64) {
		stages := []string{"a", "b"}
		if st, ok := DecodeState(md, offset, stages); ok {
			again, err := EncodeState(offset, st)
			require.NoError(t, err)
			require.Equal(t, md, again, "only canonical strings decode")
		}
		if offset < 0 {
			offset = -(offset + 1)
		}
		if cl < NoChangelog {
			cl = -(cl + 2)
		}
		room := uint64(math.MaxInt64 - offset)
		st := State{Stages: []Checkpoint{{Stage: "a", Next: offset}, {Stage: "b", Next: offset + int64(d%(room+1))}}, Changelog: cl}
		enc, err := EncodeState(offset, st)
		require.NoError(t, err)
		got, ok := DecodeState(enc, offset, stages)
		require.True(t, ok, "%q", enc)
		require.Equal(t, st, got)
	})
}

func TestMetadataRoundTrip(t *testing.T) {
	const wm = int64(1795946400000000000) // 2026-11-29T10:00:00Z
	tests := []struct {
		name   string
		offset int64
		cps    []Checkpoint
	}{
		{"all at offset, no watermarks", 0, checkpoints(chainStages, 0, 0, 0, 0, 0, 0)},
		{"typical", 1000, checkpoints(chainStages, 1042, wm, 1003, wm-5e9, 1000, 0)},
		{"one stage", 7, checkpoints([]string{"only"}, 9, 1)},
		{"negative watermark", 5, checkpoints(chainStages, 5, -1, 6, math.MinInt64, 7, -36)},
		{"extremes", 0, checkpoints(chainStages, math.MaxInt64, math.MaxInt64, 0, math.MinInt64, 1, 0)},
		{"large offset", math.MaxInt64 - 1, checkpoints(chainStages,
			math.MaxInt64-1, 0, math.MaxInt64, 1, math.MaxInt64-1, 2)},
		{"names with separators", 3, checkpoints([]string{"a,b", "c:d.e", ""}, 3, 0, 4, 0, 5, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md, err := EncodeMetadata(tc.offset, tc.cps)
			require.NoError(t, err)
			assert.LessOrEqual(t, len(md), MaxMetadataLen)
			got, ok := DecodeMetadata(md, tc.offset, stageNames(tc.cps))
			require.True(t, ok, "decode %q", md)
			assert.Equal(t, tc.cps, got)
		})
	}
}

func stageNames(cps []Checkpoint) []string {
	names := make([]string, len(cps))
	for i, cp := range cps {
		names[i] = cp.Stage
	}
	return names
}

// The format is part of the compatibility promise: these exact strings must
// keep decoding to these checkpoints.
func TestMetadataGolden(t *testing.T) {
	cps := checkpoints(chainStages, 1042, 1795946400000000000, 1003, 0, 1000, -1)
	md, err := EncodeMetadata(1000, cps)
	require.NoError(t, err)
	assert.Equal(t, "dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1", md)
	got, ok := DecodeMetadata("dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1", 1000, chainStages)
	require.True(t, ok)
	assert.Equal(t, cps, got)
}

func TestMetadataProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		stages := make([]string, 1+r.IntN(MaxStages))
		for j := range stages {
			stages[j] = fmt.Sprintf("s%d-%d", j, r.IntN(1000))
		}
		offset := randOffset(r)
		cps := make([]Checkpoint, len(stages))
		for j, s := range stages {
			cps[j] = Checkpoint{Stage: s, Next: offset + r.Int64N(math.MaxInt64-offset+1)>>r.IntN(64)}
			if r.IntN(4) != 0 {
				cps[j].Watermark = int64(r.Uint64()) >> r.IntN(64)
			}
		}
		md, err := EncodeMetadata(offset, cps)
		require.NoError(t, err, "case %d", i)
		require.LessOrEqual(t, len(md), MaxMetadataLen)
		got, ok := DecodeMetadata(md, offset, stages)
		require.True(t, ok, "case %d: %q", i, md)
		require.Equal(t, cps, got, "case %d", i)

		// Any other stage list or offset is rejected.
		other := append([]string(nil), stages...)
		other[r.IntN(len(other))] += "x"
		_, ok = DecodeMetadata(md, offset, other)
		require.False(t, ok, "case %d: other stages", i)
		_, ok = DecodeMetadata(md, offset, append(stages, "extra"))
		require.False(t, ok, "case %d: extra stage", i)
		if offset > 0 {
			_, ok = DecodeMetadata(md, offset-1, stages)
			require.False(t, ok, "case %d: other offset", i)
		}
	}
}

func randOffset(r *rand.Rand) int64 {
	switch r.IntN(3) {
	case 0:
		return r.Int64N(1000)
	case 1:
		return r.Int64N(1 << 40)
	default:
		return r.Int64N(math.MaxInt64)
	}
}

func TestMaxStages(t *testing.T) {
	worst := func(n int) []Checkpoint {
		cps := make([]Checkpoint, n)
		for i := range cps {
			cps[i] = Checkpoint{Stage: strings.Repeat("long stage name ", 100), Next: math.MaxInt64, Watermark: math.MinInt64}
		}
		return cps
	}
	md, err := EncodeMetadata(0, worst(MaxStages))
	require.NoError(t, err, "MaxStages always fit, whatever the names' length")
	assert.Greater(t, len(md), MaxMetadataLen-maxStageLen, "MaxStages is tight")

	_, err = EncodeMetadata(0, worst(MaxStages+1))
	require.ErrorIs(t, err, ErrMetadataTooLarge)
	assert.Contains(t, err.Error(), "bytes")

	many := make([]Checkpoint, 1000)
	for i := range many {
		many[i] = Checkpoint{Stage: fmt.Sprintf("stage-%d", i), Next: int64(i)}
	}
	_, err = EncodeMetadata(0, many)
	require.ErrorIs(t, err, ErrMetadataTooLarge)
}

func TestEncodeMetadataInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		offset int64
		cps    []Checkpoint
	}{
		"no stages":       {0, nil},
		"negative offset": {-1, checkpoints([]string{"a"}, 0, 0)},
		"next < offset":   {10, checkpoints(chainStages, 10, 0, 9, 0, 11, 0)},
	} {
		_, err := EncodeMetadata(tc.offset, tc.cps)
		assert.ErrorIs(t, err, ErrInvalidCheckpoint, name)
	}
}

func TestDecodeMetadataForeign(t *testing.T) {
	valid, err := EncodeMetadata(1000, checkpoints(chainStages, 1042, 77, 1003, 0, 1000, 0))
	require.NoError(t, err)
	_, ok := DecodeMetadata(valid, 1000, chainStages)
	require.True(t, ok, "the base case decodes: the rejections below are meaningful")
	hash := valid[len("dfl1:") : len("dfl1:")+8]

	r := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 64)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	// A parallel-consumer-style offset map: base64 of a binary payload.
	pc := base64.StdEncoding.EncodeToString([]byte{0x01, 0x78, 0x9c, 0x63, 0x60, 0x60, 0x60, 0x02, 0x00})

	for name, md := range map[string]string{
		"empty":              "",
		"json":               "{}",
		"json object":        `{"click":1042,"install":1003}`,
		"random bytes":       string(random),
		"parallel consumer":  pc,
		"old version":        strings.Replace(valid, "dfl1:", "dfl0:", 1),
		"future version":     strings.Replace(valid, "dfl1:", "dfl2:", 1),
		"upper case tag":     strings.Replace(valid, "dfl1:", "DFL1:", 1),
		"no tag":             strings.TrimPrefix(valid, "dfl1:"),
		"tag only":           "dfl1:",
		"tag and hash":       "dfl1:" + hash,
		"no entries":         "dfl1:" + hash + ":",
		"upper case hash":    "dfl1:" + strings.ToUpper(hash) + valid[13:],
		"truncated":          valid[:len(valid)-2],
		"too few stages":     "dfl1:" + hash + ":16,3",
		"too many stages":    valid + ",0",
		"empty entry":        "dfl1:" + hash + ":16,,0",
		"leading zero":       "dfl1:" + hash + ":016,3,0",
		"plus sign":          "dfl1:" + hash + ":+16,3,0",
		"negative delta":     "dfl1:" + hash + ":-16,3,0",
		"upper case digits":  "dfl1:" + hash + ":G,3,0",
		"zero watermark":     "dfl1:" + hash + ":16.0,3,0",
		"empty watermark":    "dfl1:" + hash + ":16.,3,0",
		"two watermarks":     "dfl1:" + hash + ":16.1.2,3,0",
		"delta overflow":     "dfl1:" + hash + ":1y2p0ij32e8e8,3,0",
		"watermark overflow": "dfl1:" + hash + ":16.1y2p0ij32e8e8,3,0",
		"trailing newline":   valid + "\n",
		"too long":           valid + strings.Repeat("x", MaxMetadataLen),
	} {
		cps, ok := DecodeMetadata(md, 1000, chainStages)
		assert.False(t, ok, "%s: %q", name, md)
		assert.Nil(t, cps, name)
	}

	for name, tc := range map[string]struct {
		offset int64
		stages []string
	}{
		"other offset":       {1001, chainStages},
		"negative offset":    {-1, chainStages},
		"reordered stages":   {1000, []string{"install", "click", "purchase"}},
		"renamed stage":      {1000, []string{"click", "install", "buy"}},
		"fewer stages":       {1000, chainStages[:2]},
		"no stages":          {1000, nil},
		"concatenated names": {1000, []string{"clickinstall", "", "purchase"}},
	} {
		_, ok := DecodeMetadata(valid, tc.offset, tc.stages)
		assert.False(t, ok, name)
	}
}

// FuzzDecodeMetadata: decoding never panics; whatever decodes is canonical
// (re-encodes to the same string) with every Next >= offset; whatever
// EncodeMetadata produces decodes back to the same checkpoints.
func FuzzDecodeMetadata(f *testing.F) {
	f.Add("", int64(0), uint64(0), int64(0), uint64(0), int64(0))
	f.Add("dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1", int64(1000), uint64(42), int64(1795946400000000000), uint64(3), int64(0))
	f.Add("{}", int64(5), uint64(1), int64(-1), uint64(math.MaxInt64), int64(math.MinInt64))
	f.Add("dfl1:00000000:0,0,0", int64(math.MaxInt64), uint64(0), int64(1), uint64(1), int64(1))
	f.Add("dfl1:00000000:z.-1,1y2p0ij32e8e7", int64(7), uint64(0), int64(1), uint64(1), int64(1))
	f.Fuzz(func(t *testing.T, md string, offset int64, d0 uint64, w0 int64, d1 uint64, w1 int64) {
		stages := []string{"a", "b"}
		checkDecode := func(md string) {
			if cps, ok := DecodeMetadata(md, offset, stages); ok {
				again, err := EncodeMetadata(offset, cps)
				require.NoError(t, err)
				require.Equal(t, md, again, "only canonical strings decode")
				for _, cp := range cps {
					require.GreaterOrEqual(t, cp.Next, offset)
				}
			}
		}
		checkDecode(md)
		// Random input rarely carries the right hash; repair it so that the
		// entry parser gets exercised too.
		if rest, ok := strings.CutPrefix(md, "dfl1:"); ok && len(rest) >= hashLen {
			h := string(appendHash(nil, stageHash(len(stages), func(i int) string { return stages[i] }, offset)))
			checkDecode("dfl1:" + h + rest[hashLen:])
		}

		if offset < 0 {
			offset = -(offset + 1)
		}
		room := uint64(math.MaxInt64 - offset)
		cps := []Checkpoint{
			{Stage: "a", Next: offset + int64(d0%(room+1)), Watermark: w0},
			{Stage: "b", Next: offset + int64(d1%(room+1)), Watermark: w1},
		}
		enc, err := EncodeMetadata(offset, cps)
		require.NoError(t, err)
		got, ok := DecodeMetadata(enc, offset, stages)
		require.True(t, ok, "%q", enc)
		require.Equal(t, cps, got)
	})
}
