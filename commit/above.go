package commit

import (
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Offsets completed above a stage's position (DESIGN.md "The commit manager":
// the alternative to draining until every stage's completed set is
// contiguous). Checkpoint.Above lists them; version 3 of the metadata
// carries them (see the package doc).

const (
	metadataV3 = "dfl3:"
	// aboveTag opens the above section of one stage: ";a" idx "=" set.
	aboveTag = ";a"
	// aboveOverhead is the longest above section without its set's digits:
	// the tag, a stage index (at most 2 base-36 digits: MaxStages < 36*36),
	// "=" and the set's kind ("r" or "b").
	aboveOverhead = len(aboveTag) + 2 + 1 + 1
)

var b64 = base64.RawURLEncoding

// MaxAboveSpan returns the span that the above sets of stages stages always
// fit in: when every stage's Above lies within [Next, Next+span), the
// metadata of any positions, watermarks and changelog offset fits in
// MaxMetadataLen (the bitmap of a set is at most ceil(span/8) bytes,
// base64). A stage must not begin an offset above its position + span
// (Tracker.SetSpan). It returns 0 when stages is out of range.
func MaxAboveSpan(stages int) int {
	if stages <= 0 || stages > MaxStages {
		return 0
	}
	fixed := len(metadataV3) + hashLen + 1 + stages*maxStageLen - 1 + maxChangelogLen
	per := (MaxMetadataLen-fixed)/stages - aboveOverhead
	if per <= 0 {
		return 0
	}
	return per * 3 / 4 * 8 // base64 without padding: 4 characters per 3 bytes
}

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

// encodeV3 writes version 3: version 1's body (or version 2's with its
// changelog section) followed by one above section per stage with a
// non-empty set, in stage order. A set is never truncated: metadata that
// does not fit is ErrMetadataTooLarge.
func encodeV3(offset int64, st State) (string, error) {
	stages := make([]Checkpoint, len(st.Stages))
	for i, cp := range st.Stages {
		if !validAbove(cp.Next, cp.Above) {
			return "", fmt.Errorf("%w: stage %q: offsets completed above %d not increasing or below it",
				ErrInvalidCheckpoint, cp.Stage, cp.Next)
		}
		cp.Above = nil
		stages[i] = cp
	}
	md, err := EncodeMetadata(offset, stages)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 0, MaxMetadataLen)
	buf = append(buf, metadataV3...)
	buf = append(buf, md[len(metadataV1):]...)
	if st.Changelog != NoChangelog {
		buf = append(buf, changelogTag...)
		buf = strconv.AppendInt(buf, st.Changelog, 36)
	}
	for i, cp := range st.Stages {
		if len(cp.Above) == 0 {
			continue
		}
		buf = append(buf, aboveTag...)
		buf = strconv.AppendInt(buf, int64(i), 36)
		buf = append(buf, '=')
		buf = appendAbove(buf, cp.Next, cp.Above)
	}
	if len(buf) > MaxMetadataLen {
		return "", fmt.Errorf("%w: %d bytes for %d stages with offsets completed above their positions (max %d)",
			ErrMetadataTooLarge, len(buf), len(st.Stages), MaxMetadataLen)
	}
	return string(buf), nil
}

// decodeV3 is DecodeState of version 3.
func decodeV3(md string, offset int64, stages []string) (State, bool) {
	rest, ok := strings.CutPrefix(md, metadataV3)
	if !ok || len(md) > MaxMetadataLen {
		return State{}, false
	}
	body, sections, _ := strings.Cut(rest, ";")
	cps, ok := decodeV1(metadataV1+body, offset, stages)
	if !ok {
		return State{}, false
	}
	st := State{Stages: cps, Changelog: NoChangelog}
	parts := strings.Split(sections, ";")
	if len(parts) > 0 && strings.HasPrefix(parts[0], "c") {
		n, err := strconv.ParseUint(parts[0][1:], 36, 63)
		if err != nil {
			return State{}, false
		}
		st.Changelog = int64(n)
		parts = parts[1:]
	}
	if len(parts) == 0 {
		return State{}, false // version 3 carries at least one set
	}
	for _, p := range parts {
		a, ok := strings.CutPrefix(p, "a")
		if !ok {
			return State{}, false
		}
		idx, set, ok := strings.Cut(a, "=")
		if !ok {
			return State{}, false
		}
		i, err := strconv.ParseUint(idx, 36, 16)
		if err != nil || int(i) >= len(cps) || cps[i].Above != nil {
			return State{}, false
		}
		if cps[i].Above, ok = decodeAbove(set, cps[i].Next); !ok {
			return State{}, false
		}
	}
	// Canonical form only (stage order, shorter encoding, no leading zeros).
	if again, err := EncodeState(offset, st); err != nil || again != md {
		return State{}, false
	}
	return st, true
}
