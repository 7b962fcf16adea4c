package commit

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var chainStages = []string{"click", "install", "purchase"}

func checkpoints(stages []string, nextWM ...int64) []Checkpoint {
	cps := make([]Checkpoint, len(stages))
	for i, s := range stages {
		cps[i] = Checkpoint{Stage: s, Next: nextWM[2*i], Watermark: nextWM[2*i+1]}
	}
	return cps
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

func TestValidateStages(t *testing.T) {
	require.NoError(t, ValidateStages(chainStages))
	assert.ErrorIs(t, ValidateStages(nil), ErrInvalidCheckpoint)
	assert.ErrorIs(t, ValidateStages([]string{"a", ""}), ErrInvalidCheckpoint)
	assert.ErrorIs(t, ValidateStages([]string{"a", "b", "a"}), ErrInvalidCheckpoint)
	many := make([]string, MaxStages+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	require.NoError(t, ValidateStages(many[:MaxStages]))
	assert.ErrorIs(t, ValidateStages(many), ErrMetadataTooLarge)
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

// TestCheckpointsLogAsTimes: logged checkpoints show each stage's watermark
// as an RFC 3339 time, in the text and the JSON handler, never as Unix
// nanoseconds.
func TestCheckpointsLogAsTimes(t *testing.T) {
	wm := time.Date(2026, 11, 29, 12, 30, 0, 0, time.UTC)
	cps := []Checkpoint{{Stage: "click", Next: 120, Watermark: wm.UnixNano()}, {Stage: "install", Next: 100}}
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("partition started", "resume", Checkpoints(cps))
	slog.New(slog.NewJSONHandler(&js, nil)).Info("partition started", "resume", Checkpoints(cps))
	require.Contains(t, text.String(), "resume.click.next=120 resume.click.watermark=2026-11-29T12:30:00Z resume.install.next=100 resume.install.watermark=none")
	require.Contains(t, js.String(), `"resume":{"click":{"next":120,"watermark":"2026-11-29T12:30:00Z"},"install":{"next":100,"watermark":"none"}}`)
	for _, out := range []string{text.String(), js.String()} {
		require.NotContains(t, out, strconv.FormatInt(wm.UnixNano(), 10))
	}
}
