package commit

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestManagerChangelog(t *testing.T) {
	m := NewManager(chainStages, 100)
	st := State{Stages: checkpoints(chainStages, 110, 0, 105, 0, 100, 0), Changelog: 40}
	off, md, changed, err := m.NextState(st)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, int64(100), off)
	got, ok := DecodeState(md, off, chainStages)
	require.True(t, ok)
	assert.Equal(t, st, got)
	m.Committed(off, md)

	_, _, changed, err = m.NextState(st)
	require.NoError(t, err)
	assert.False(t, changed)

	st.Changelog = 45 // state written, positions unchanged: still a commit
	_, _, changed, err = m.NextState(st)
	require.NoError(t, err)
	assert.True(t, changed)

	st.Changelog = 39
	_, _, _, err = m.NextState(st)
	var re *RegressionError
	require.ErrorAs(t, err, &re, "the committed changelog offset never goes back")
	assert.Equal(t, "changelog", re.Stage)

	// Metadata committed at assignment raises the floor too.
	m = NewManager(chainStages, 100)
	m.Committed(off, md)
	_, _, _, err = m.NextState(State{Stages: st.Stages, Changelog: 10})
	require.ErrorIs(t, err, ErrRegression)
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
