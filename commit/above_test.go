package commit

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randAbove returns a random set of offsets in [next, next+span), sometimes
// dense runs, sometimes scattered, sometimes alternating (the worst case of
// the run encoding).
func randAbove(r *rand.Rand, next int64, span int) []int64 {
	var out []int64
	switch r.IntN(4) {
	case 0: // runs
		for o := next + int64(r.IntN(5)); o < next+int64(span); {
			n := 1 + r.IntN(40)
			for ; n > 0 && o < next+int64(span); n-- {
				out = append(out, o)
				o++
			}
			o += 1 + int64(r.IntN(30))
		}
	case 1: // alternating
		for o := next + 1; o < next+int64(span); o += 2 {
			out = append(out, o)
		}
	case 2: // scattered
		for o := next; o < next+int64(span); o++ {
			if r.IntN(3) == 0 {
				out = append(out, o)
			}
		}
	default: // a few
		for range 1 + r.IntN(5) {
			out = append(out, next+r.Int64N(int64(span)))
		}
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

func TestAboveRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		stages := chainStages[:1+r.IntN(len(chainStages))]
		span := MaxAboveSpan(len(stages))
		offset := randOffset(r) >> r.IntN(40)
		if offset > math.MaxInt64-int64(1<<40)-int64(span) {
			offset = 0
		}
		cps := make([]Checkpoint, len(stages))
		for j, s := range stages {
			cps[j] = Checkpoint{Stage: s, Next: offset + r.Int64N(1<<40), Watermark: int64(r.Uint64()) >> r.IntN(64)}
			if r.IntN(2) == 0 {
				cps[j].Above = randAbove(r, cps[j].Next, span)
			}
		}
		st := State{Stages: cps, Changelog: NoChangelog}
		if r.IntN(2) == 0 {
			st.Changelog = randOffset(r)
		}
		md, err := EncodeState(offset, st)
		require.NoError(t, err, "case %d: a set within MaxAboveSpan always fits", i)
		require.LessOrEqual(t, len(md), MaxMetadataLen)
		got, ok := DecodeState(md, offset, stages)
		require.True(t, ok, "case %d: %q", i, md)
		for j := range cps {
			if len(cps[j].Above) == 0 {
				cps[j].Above = nil
			}
		}
		require.Equal(t, st, got, "case %d: %q", i, md)
		if !hasAbove(cps) {
			assert.False(t, strings.HasPrefix(md, metadataV3), "no set: version 1 or 2, byte for byte")
		}
	}
}

// The worst case: every stage at the largest positions, with the densest
// bitmap over the whole span (alternating offsets: runs are longer).
func TestMaxAboveSpanAlwaysFits(t *testing.T) {
	for n := 1; n <= MaxStages; n++ {
		span := MaxAboveSpan(n)
		if span == 0 {
			require.Greater(t, n, 20, "only long chains have no room for sets")
			continue
		}
		cps := make([]Checkpoint, n)
		for i := range cps {
			next := int64(math.MaxInt64) - int64(span) - 1
			var above []int64
			for o := next + 1; o < next+int64(span); o += 2 {
				above = append(above, o)
			}
			above = append(above, next+int64(span)-1)
			cps[i] = Checkpoint{Stage: strings.Repeat("s", 300) + string(rune('a'+i)), Next: next, Watermark: math.MinInt64, Above: slices.Compact(above)}
		}
		// And the idle releases the metadata keeps room for, as long as
		// they can be written.
		var idle []IdleRelease
		for k := range IdleReleaseCap(n) {
			idle = append(idle, IdleRelease{Stage: cps[n-1].Stage, After: 48e17 + int64(k), LeaderNext: math.MaxInt64, LeaderWatermark: math.MinInt64})
		}
		md, err := EncodeState(0, State{Stages: cps, Changelog: math.MaxInt64, Idle: idle})
		require.NoError(t, err, "%d stages, span %d", n, span)
		assert.LessOrEqual(t, len(md), MaxMetadataLen)
	}
	assert.Equal(t, 1400, MaxAboveSpan(3), "three stages carry 1,400 offsets next to 4 idle releases")
	assert.Equal(t, MaxIdleReleases, IdleReleaseCap(27))
	assert.Less(t, IdleReleaseCap(28), MaxIdleReleases)
	assert.Zero(t, MaxAboveSpan(MaxStages+1))
}

func TestAboveGolden(t *testing.T) {
	cps := []Checkpoint{
		{Stage: "click", Next: 1042, Watermark: 1795946400000000000},
		{Stage: "install", Next: 1003, Above: []int64{1005, 1006, 1007, 1100}},
		{Stage: "purchase", Next: 1000, Watermark: -1},
	}
	md, err := EncodeMetadata(1000, cps)
	require.NoError(t, err)
	// Runs from next: 1005 is 2 above it, three long (_2); then 1100 is
	// 91 (base 36: 2j) above 1007+2.
	assert.Equal(t, "dfl3:3fb71d28:16.dn7lv69i2v40,3,0.-1;a1=r2_2.2j", md)
	got, ok := DecodeMetadata(md, 1000, stageNames(cps))
	require.True(t, ok)
	assert.Equal(t, cps, got)

	// A dense scattered set is shorter as a bitmap.
	var above []int64
	for o := int64(1004); o < 1100; o += 3 {
		above = append(above, o)
	}
	cps[1].Above = above
	md, err = EncodeState(1000, State{Stages: cps, Changelog: 77})
	require.NoError(t, err)
	assert.Contains(t, md, ";c25;a1=b")
	st, ok := DecodeState(md, 1000, stageNames(cps))
	require.True(t, ok)
	assert.Equal(t, above, st.Stages[1].Above)
	assert.Equal(t, int64(77), st.Changelog)
}

func TestAboveInvalid(t *testing.T) {
	for _, above := range [][]int64{{1002}, {1005, 1005}, {1006, 1005}} {
		_, err := EncodeMetadata(1000, []Checkpoint{{Stage: "a", Next: 1003, Above: above}})
		require.ErrorIs(t, err, ErrInvalidCheckpoint, "%v", above)
	}
	base := "dfl3:" + strings.Split(mustEncode(t), ":")[1] + ":3"
	for _, md := range []string{
		base,                  // version 3 without a set
		base + ";a0=r",        // empty runs
		base + ";a0=b",        // empty bitmap
		base + ";a0=bAA",      // all zero
		base + ";a1=r0",       // no such stage
		base + ";a0=r0;a0=r5", // twice
		base + ";a0=r01",      // leading zero
		base + ";a0=r0_0",     // explicit length 0
		base + ";a0=r0.0",     // runs not maximal (1003, 1004)
		base + ";a0=bAQ",      // shorter as runs (1003)
		base + ";x0=r0",       // unknown section
	} {
		_, ok := DecodeState(md, 1000, []string{"a"})
		assert.False(t, ok, "%q", md)
	}
	_, ok := DecodeState(base+";a0=r0", 1000, []string{"a"})
	assert.True(t, ok)
}

func mustEncode(t *testing.T) string {
	md, err := EncodeMetadata(1000, []Checkpoint{{Stage: "a", Next: 1003}})
	require.NoError(t, err)
	return md
}
