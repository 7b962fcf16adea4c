package commit

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The commit metadata codec, every version side by side (the grammar is in
// the package doc):
//
//	version 1  "dfl1:" hash ":" stages
//	version 2  "dfl2:" hash ":" stages ";c" changelog
//	version 3  "dfl3:" hash ":" stages [ ";c" changelog ] 1*( ";a" index "=" set )
//	version 4  "dfl4:" hash ":" stages [ ";c" changelog ] *( ";a" index "=" set ) 1*( ";i" release )
//
// The four share the header and the stage entries; a version is which
// sections may follow them. The encoder writes the lowest version that can
// carry the state, so a chain with neither a changelog nor offsets above its
// positions writes version 1 and one with a changelog but no such offsets
// writes version 2, byte for byte as before version 3 existed; version 4 is
// written only when the state carries idle releases. The decoder
// accepts exactly the strings the encoder writes: it parses, then encodes
// what it parsed and compares.

const (
	metadataV1 = "dfl1:"
	metadataV2 = "dfl2:"
	metadataV3 = "dfl3:"
	metadataV4 = "dfl4:"
	// tagLen is the length of every version tag.
	tagLen  = len(metadataV1)
	hashLen = 8

	// changelogTag opens the changelog section (versions 2 and 3).
	changelogTag = ";c"
	// aboveTag opens the above section of one stage (version 3): ";a" index
	// "=" set.
	aboveTag = ";a"

	// maxStageLen is the longest stage entry: "," delta "." "-" watermark,
	// each number at most 13 base-36 digits.
	maxStageLen = 1 + 13 + 1 + 1 + 13
	// maxChangelogLen is the longest changelog section: the tag and 13
	// base-36 digits.
	maxChangelogLen = len(changelogTag) + 13
	// aboveOverhead is the longest above section without its set's digits:
	// the tag, a stage index (at most 2 base-36 digits: MaxStages < 36*36),
	// "=" and the set's kind ("r" or "b").
	aboveOverhead = len(aboveTag) + 2 + 1 + 1
)

const (
	// MaxMetadataLen bounds the encoded metadata, in bytes. Kafka's default
	// offset.metadata.max.bytes is 4096; this leaves room for brokers
	// configured lower and for the other partitions of a commit request.
	MaxMetadataLen = 1024

	// MaxStages is the largest number of stages whose metadata always fits in
	// MaxMetadataLen, whatever the positions, watermarks and changelog
	// offset. Stage names do not count: only their hash is encoded.
	MaxStages = (MaxMetadataLen - tagLen - hashLen - 1 + 1 - maxChangelogLen) / maxStageLen
)

// MaxAboveSpan returns the span that the above sets of stages stages always
// fit in: when every stage's Above lies within [Next, Next+span), the
// metadata of any positions, watermarks and changelog offset fits in
// MaxMetadataLen (the bitmap of a set is at most ceil(span/8) bytes,
// base64), next to IdleReleaseCap(stages) idle releases. A stage must not
// begin an offset above its position + span (Tracker.SetSpan). It returns
// 0 when stages is out of range.
func MaxAboveSpan(stages int) int {
	if stages <= 0 || stages > MaxStages {
		return 0
	}
	fixed := tagLen + hashLen + 1 + stages*maxStageLen - 1 + maxChangelogLen + IdleReleaseCap(stages)*maxIdleLen
	per := (MaxMetadataLen-fixed)/stages - aboveOverhead
	if per <= 0 {
		return 0
	}
	return per * 3 / 4 * 8 // base64 without padding: 4 characters per 3 bytes
}

// EncodeMetadata encodes every stage's checkpoint into the string committed to
// Kafka as metadata next to offset, the committed offset (normally the
// minimum of the Nexts; any offset <= every Next is accepted): EncodeState
// without a changelog offset. It returns an error wrapping
// ErrMetadataTooLarge if the result would exceed MaxMetadataLen, or
// ErrInvalidCheckpoint if cps is empty, offset < 0, a Next < offset or an
// Above is not increasing from its Next.
func EncodeMetadata(offset int64, cps []Checkpoint) (string, error) {
	return EncodeState(offset, State{Stages: cps, Changelog: NoChangelog})
}

// EncodeState encodes st into the metadata committed next to offset, in the
// lowest version that carries it: 1 without a changelog offset or offsets
// above the positions, 2 with a changelog offset only, 3 with offsets above,
// 4 with idle releases (see the package doc). Errors as EncodeMetadata, and
// ErrInvalidCheckpoint for a changelog offset below NoChangelog or idle
// releases that are not increasing from offset (each with a leader
// position past it and a stage of the list), ErrMetadataTooLarge for more
// of them than IdleReleaseCap.
func EncodeState(offset int64, st State) (string, error) {
	cps := st.Stages
	switch {
	case st.Changelog < NoChangelog:
		return "", fmt.Errorf("%w: changelog offset %d", ErrInvalidCheckpoint, st.Changelog)
	case len(cps) == 0 || offset < 0:
		return "", fmt.Errorf("%w: %d stages at offset %d", ErrInvalidCheckpoint, len(cps), offset)
	}
	for _, cp := range cps {
		if cp.Next < offset {
			return "", fmt.Errorf("%w: stage %q at %d is below the committed offset %d",
				ErrInvalidCheckpoint, cp.Stage, cp.Next, offset)
		}
		if !validAbove(cp.Next, cp.Above) {
			return "", fmt.Errorf("%w: stage %q: offsets completed above %d not increasing or below it",
				ErrInvalidCheckpoint, cp.Stage, cp.Next)
		}
	}
	if err := validIdle(offset, cps, st.Idle); err != nil {
		return "", err
	}
	above := hasAbove(cps)
	tag := metadataV1
	switch {
	case len(st.Idle) > 0:
		tag = metadataV4
	case above:
		tag = metadataV3
	case st.Changelog != NoChangelog:
		tag = metadataV2
	}

	buf := make([]byte, 0, tagLen+hashLen+1+len(cps)*16+maxChangelogLen)
	buf = append(buf, tag...)
	buf = appendHash(buf, stageHash(len(cps), func(i int) string { return cps[i].Stage }, offset))
	buf = append(buf, ':')
	for i, cp := range cps {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, cp.Next-offset, 36)
		if cp.Watermark != 0 {
			buf = append(buf, '.')
			buf = strconv.AppendInt(buf, cp.Watermark, 36)
		}
	}
	if st.Changelog != NoChangelog {
		buf = append(buf, changelogTag...)
		buf = strconv.AppendInt(buf, st.Changelog, 36)
	}
	for i, cp := range cps {
		if len(cp.Above) == 0 {
			continue
		}
		buf = append(buf, aboveTag...)
		buf = strconv.AppendInt(buf, int64(i), 36)
		buf = append(buf, '=')
		buf = appendAbove(buf, cp.Next, cp.Above)
	}
	for _, r := range st.Idle {
		buf = appendIdle(buf, offset, cps, r)
	}

	if len(buf) > MaxMetadataLen {
		what := ""
		if above {
			what = " with offsets completed above their positions"
		}
		return "", fmt.Errorf("%w: %d bytes for %d stages%s (max %d)",
			ErrMetadataTooLarge, len(buf), len(cps), what, MaxMetadataLen)
	}
	return string(buf), nil
}

// DecodeMetadata returns the checkpoints that md, committed next to offset,
// holds for exactly these stages (in that order): DecodeState without the
// changelog offset.
func DecodeMetadata(md string, offset int64, stages []string) (cps []Checkpoint, ok bool) {
	st, ok := DecodeState(md, offset, stages)
	return st.Stages, ok
}

// DecodeState decodes metadata of any version EncodeState writes, for these
// stages next to offset; version 1 decodes with Changelog = NoChangelog,
// versions 1 to 3 with no idle releases. ok
// is false — never a panic, never an error — when md is empty, written by
// another program, of an unknown version, garbled, for a different stage
// list or offset, or not in canonical form; the caller then starts every
// stage at offset. When ok, every Next is >= offset.
func DecodeState(md string, offset int64, stages []string) (st State, ok bool) {
	if offset < 0 || len(stages) == 0 || len(md) > MaxMetadataLen || len(md) < tagLen {
		return State{}, false
	}
	tag, rest := md[:tagLen], md[tagLen:]
	if tag != metadataV1 && tag != metadataV2 && tag != metadataV3 && tag != metadataV4 {
		return State{}, false
	}

	// The header: hash ":".
	if len(rest) < hashLen+1 || rest[hashLen] != ':' {
		return State{}, false
	}
	var want [hashLen]byte
	appendHash(want[:0], stageHash(len(stages), func(i int) string { return stages[i] }, offset))
	if rest[:hashLen] != string(want[:]) {
		return State{}, false
	}

	// The stage entries, one per stage, up to the first section.
	entries, sections, hasSections := strings.Cut(rest[hashLen+1:], ";")
	st = State{Stages: make([]Checkpoint, len(stages)), Changelog: NoChangelog}
	for i, name := range stages {
		entry, tail, more := strings.Cut(entries, ",")
		if more != (i < len(stages)-1) {
			return State{}, false // too few or too many entries
		}
		entries = tail
		cp, ok := decodeStage(entry, offset)
		if !ok {
			return State{}, false
		}
		cp.Stage = name
		st.Stages[i] = cp
	}

	// The sections each version allows.
	var parts []string
	if hasSections {
		parts = strings.Split(sections, ";")
	}
	if tag != metadataV1 && len(parts) > 0 && strings.HasPrefix(parts[0], "c") {
		n, err := strconv.ParseUint(parts[0][1:], 36, 63)
		if err != nil {
			return State{}, false
		}
		st.Changelog = int64(n)
		parts = parts[1:]
	}
	switch tag {
	case metadataV1:
		if len(parts) > 0 {
			return State{}, false
		}
	case metadataV2:
		if st.Changelog == NoChangelog || len(parts) > 0 {
			return State{}, false
		}
	case metadataV3:
		if len(parts) == 0 {
			return State{}, false // version 3 carries at least one set
		}
		for _, p := range parts {
			if !decodeAboveSection(p, st.Stages) {
				return State{}, false
			}
		}
	case metadataV4:
		for len(parts) > 0 && strings.HasPrefix(parts[0], "a") {
			if !decodeAboveSection(parts[0], st.Stages) {
				return State{}, false
			}
			parts = parts[1:]
		}
		if len(parts) == 0 {
			return State{}, false // version 4 carries at least one idle release
		}
		for _, p := range parts {
			r, ok := decodeIdleSection(p, offset, st.Stages)
			if !ok {
				return State{}, false
			}
			st.Idle = append(st.Idle, r)
		}
	}

	// Canonical form only (no leading zeros, upper case, "+", stage order,
	// the shorter set encoding, the lowest version): then every accepted
	// string has exactly one meaning.
	if again, err := EncodeState(offset, st); err != nil || again != md {
		return State{}, false
	}
	return st, true
}

// decodeStage parses delta [ "." watermark ].
func decodeStage(entry string, offset int64) (Checkpoint, bool) {
	d, w, hasW := strings.Cut(entry, ".")
	delta, err := strconv.ParseUint(d, 36, 63)
	if err != nil || int64(delta) > math.MaxInt64-offset {
		return Checkpoint{}, false
	}
	cp := Checkpoint{Next: offset + int64(delta)}
	if hasW {
		if cp.Watermark, err = strconv.ParseInt(w, 36, 64); err != nil {
			return Checkpoint{}, false
		}
	}
	return cp, true
}

// decodeAboveSection parses "a" index "=" set (the section without its
// leading ";") into the stage's Above; a second section for one stage is
// rejected.
func decodeAboveSection(p string, cps []Checkpoint) bool {
	a, ok := strings.CutPrefix(p, "a")
	if !ok {
		return false
	}
	idx, set, ok := strings.Cut(a, "=")
	if !ok {
		return false
	}
	i, err := strconv.ParseUint(idx, 36, 16)
	if err != nil || int(i) >= len(cps) || cps[i].Above != nil {
		return false
	}
	cps[i].Above, ok = decodeAbove(set, cps[i].Next)
	return ok
}

// stageHash is the 32-bit FNV-1a of the n stage names (each as uvarint length
// then bytes) followed by offset as 8 bytes big-endian.
func stageHash(n int, name func(int) string, offset int64) uint32 {
	const (
		basis = 2166136261
		prime = 16777619
	)
	h := uint32(basis)
	var scratch [binary.MaxVarintLen64]byte
	for i := range n {
		s := name(i)
		for _, b := range binary.AppendUvarint(scratch[:0], uint64(len(s))) {
			h = (h ^ uint32(b)) * prime
		}
		for j := 0; j < len(s); j++ {
			h = (h ^ uint32(s[j])) * prime
		}
	}
	for _, b := range binary.BigEndian.AppendUint64(scratch[:0], uint64(offset)) {
		h = (h ^ uint32(b)) * prime
	}
	return h
}

func appendHash(buf []byte, h uint32) []byte {
	const digits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		buf = append(buf, digits[(h>>uint(shift))&0xf])
	}
	return buf
}
