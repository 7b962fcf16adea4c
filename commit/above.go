package commit

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The encoding of a set of offsets completed above a stage's position
// (Checkpoint.Above), as version 3 of the metadata carries it (codec.go).

var b64 = base64.RawURLEncoding

// validAbove reports whether above is strictly increasing and every offset
// is at or above next. (Next itself may be in the set: a stage restored
// with a set may reach it before it reads the record again.)
func validAbove(next int64, above []int64) bool {
	prev := next - 1
	for _, o := range above {
		if o <= prev {
			return false
		}
		prev = o
	}
	return true
}

// appendAbove appends the shorter of the two encodings of a non-empty set
// (runs on a tie):
//
//	runs   = "r" run *( "." run )
//	run    = b36 [ "_" b36nz ]   ; start − base, then length − 1 (omitted when 0)
//	bitmap = "b" base64url       ; no padding; bit i (LSB first) = next + i
//
// base is next for the first run and the previous run's end + 2 after
// (runs are maximal). The bitmap's last byte is not zero.
func appendAbove(buf []byte, next int64, above []int64) []byte {
	runs := appendRuns(nil, next, above)
	span := above[len(above)-1] - next + 1 // bits
	if bm := b64.EncodedLen(int((span + 7) / 8)); 1+bm < len(runs) {
		bits := make([]byte, (span+7)/8)
		for _, o := range above {
			i := o - next
			bits[i/8] |= 1 << (i % 8)
		}
		buf = append(buf, 'b')
		return b64.AppendEncode(buf, bits)
	}
	return append(buf, runs...)
}

func appendRuns(buf []byte, next int64, above []int64) []byte {
	buf = append(buf, 'r')
	base := next
	for i := 0; i < len(above); {
		j := i
		for j+1 < len(above) && above[j+1] == above[j]+1 {
			j++
		}
		if i > 0 {
			buf = append(buf, '.')
		}
		buf = strconv.AppendInt(buf, above[i]-base, 36)
		if j > i {
			buf = append(buf, '_')
			buf = strconv.AppendInt(buf, int64(j-i), 36)
		}
		base = above[j] + 2
		i = j + 1
	}
	return buf
}

// decodeAbove parses a set written by appendAbove (not necessarily
// canonical: the caller re-encodes to check). It bounds the set by
// MaxMetadataLen's worth of offsets.
func decodeAbove(s string, next int64) ([]int64, bool) {
	if s == "" {
		return nil, false
	}
	var out []int64
	switch s[0] {
	case 'r':
		base := next
		for _, run := range strings.Split(s[1:], ".") {
			st, ln, hasLen := strings.Cut(run, "_")
			d, err := strconv.ParseUint(st, 36, 63)
			if err != nil || int64(d) > math.MaxInt64-base {
				return nil, false
			}
			n := uint64(0)
			if hasLen {
				if n, err = strconv.ParseUint(ln, 36, 63); err != nil || n > 8*MaxMetadataLen {
					return nil, false
				}
			}
			start := base + int64(d)
			if int64(n) > math.MaxInt64-2-start {
				return nil, false
			}
			for o := start; o <= start+int64(n); o++ {
				out = append(out, o)
			}
			if len(out) > 8*MaxMetadataLen {
				return nil, false
			}
			base = start + int64(n) + 2
		}
	case 'b':
		bits, err := b64.DecodeString(s[1:])
		if err != nil || len(bits) == 0 || int64(len(bits))*8 > math.MaxInt64-next {
			return nil, false
		}
		for i, b := range bits {
			for k := 0; k < 8; k++ {
				if b&(1<<k) != 0 {
					out = append(out, next+int64(i*8+k))
				}
			}
		}
	default:
		return nil, false
	}
	if len(out) == 0 {
		return nil, false
	}
	return out, true
}

// hasAbove reports whether any stage carries offsets completed above its
// position.
func hasAbove(cps []Checkpoint) bool {
	return slices.ContainsFunc(cps, func(cp Checkpoint) bool { return len(cp.Above) > 0 })
}
