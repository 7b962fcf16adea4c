package commit

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Checkpoint of one stage: its position (the first offset it has not
// completed) and its event-time watermark (unix nanoseconds; 0 = none).
type Checkpoint struct {
	Stage     string
	Next      int64
	Watermark int64
	// Above lists the offsets at or above Next that the stage completed
	// (behind an incomplete record, or restored from an earlier set and
	// not read again yet: then Next itself may be one), strictly
	// increasing; nil when none. The stage resumes reading at Next and
	// skips them. Metadata carrying any is version 3; see the package doc.
	Above []int64
}

const (
	// MaxMetadataLen bounds the encoded metadata, in bytes. Kafka's default
	// offset.metadata.max.bytes is 4096; this leaves room for brokers
	// configured lower and for the other partitions of a commit request.
	MaxMetadataLen = 1024

	// MaxStages is the largest number of stages whose metadata always fits in
	// MaxMetadataLen, whatever the positions, watermarks and changelog
	// offset. Stage names do not count: only their hash is encoded.
	MaxStages = (MaxMetadataLen - len(metadataV2) - hashLen - 1 + 1 - maxChangelogLen) / maxStageLen

	metadataV1 = "dfl1:"
	hashLen    = 8
	// maxStageLen is the longest stage entry: "," delta "." "-" watermark,
	// each number at most 13 base-36 digits.
	maxStageLen = 1 + 13 + 1 + 1 + 13
)

// EncodeMetadata encodes every stage's checkpoint into the string committed to
// Kafka as metadata next to offset, the committed offset (normally the
// minimum of the Nexts; any offset <= every Next is accepted). The format is
// described in the package doc. It returns an error wrapping
// ErrMetadataTooLarge if the result would exceed MaxMetadataLen, or
// ErrInvalidCheckpoint if cps is empty, offset < 0 or a Next < offset.
func EncodeMetadata(offset int64, cps []Checkpoint) (string, error) {
	if hasAbove(cps) {
		return EncodeState(offset, State{Stages: cps, Changelog: NoChangelog})
	}
	if len(cps) == 0 || offset < 0 {
		return "", fmt.Errorf("%w: %d stages at offset %d", ErrInvalidCheckpoint, len(cps), offset)
	}
	for _, cp := range cps {
		if cp.Next < offset {
			return "", fmt.Errorf("%w: stage %q at %d is below the committed offset %d",
				ErrInvalidCheckpoint, cp.Stage, cp.Next, offset)
		}
	}
	buf := make([]byte, 0, len(metadataV1)+hashLen+1+len(cps)*16)
	buf = append(buf, metadataV1...)
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
	if len(buf) > MaxMetadataLen {
		return "", fmt.Errorf("%w: %d bytes for %d stages (max %d)",
			ErrMetadataTooLarge, len(buf), len(cps), MaxMetadataLen)
	}
	return string(buf), nil
}

// DecodeMetadata returns the checkpoints that md, committed next to offset,
// holds for exactly these stages (in that order). ok is false — never a
// panic, never an error — when md is empty, written by another program, of an
// unknown version, garbled, for a different stage list or offset, or not in
// canonical form; the caller then starts every stage at offset. When ok, every
// Next is >= offset. It reads both versions; DecodeState also returns the
// changelog offset of version 2.
func DecodeMetadata(md string, offset int64, stages []string) (cps []Checkpoint, ok bool) {
	st, ok := DecodeState(md, offset, stages)
	return st.Stages, ok
}

// decodeV1 is DecodeMetadata of version 1.
func decodeV1(md string, offset int64, stages []string) (cps []Checkpoint, ok bool) {
	if offset < 0 || len(stages) == 0 || len(md) > MaxMetadataLen {
		return nil, false
	}
	rest, ok := strings.CutPrefix(md, metadataV1)
	if !ok || len(rest) < hashLen+1 || rest[hashLen] != ':' {
		return nil, false
	}
	var want [hashLen]byte
	appendHash(want[:0], stageHash(len(stages), func(i int) string { return stages[i] }, offset))
	if rest[:hashLen] != string(want[:]) {
		return nil, false
	}
	entries := rest[hashLen+1:]
	cps = make([]Checkpoint, len(stages))
	for i, name := range stages {
		entry, tail, more := strings.Cut(entries, ",")
		if more != (i < len(stages)-1) {
			return nil, false // too few or too many entries
		}
		entries = tail
		cp, ok := decodeStage(entry, offset)
		if !ok {
			return nil, false
		}
		cp.Stage = name
		cps[i] = cp
	}
	// Accept only the canonical form (no leading zeros, upper case, "+"…):
	// then every accepted string has exactly one meaning.
	if again, err := EncodeMetadata(offset, cps); err != nil || again != md {
		return nil, false
	}
	return cps, true
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

// ValidateStages reports whether stages can be used with a Manager and the
// metadata format: at least one stage, at most MaxStages, every name
// non-empty and unique. Call it when the chain is configured; then
// EncodeMetadata and Manager.Next never fail with ErrMetadataTooLarge.
func ValidateStages(stages []string) error {
	switch {
	case len(stages) == 0:
		return fmt.Errorf("%w: no stages", ErrInvalidCheckpoint)
	case len(stages) > MaxStages:
		return fmt.Errorf("%w: %d stages (max %d)", ErrMetadataTooLarge, len(stages), MaxStages)
	}
	seen := make(map[string]bool, len(stages))
	for i, s := range stages {
		if s == "" {
			return fmt.Errorf("%w: stage %d has an empty name", ErrInvalidCheckpoint, i)
		}
		if seen[s] {
			return fmt.Errorf("%w: duplicate stage name %q", ErrInvalidCheckpoint, s)
		}
		seen[s] = true
	}
	return nil
}

// LogValue implements slog.LogValuer: the stage's position and its
// watermark as an RFC 3339 time in UTC ("none" for 0), not nanoseconds.
func (c Checkpoint) LogValue() slog.Value {
	wm := "none"
	if c.Watermark != 0 {
		wm = time.Unix(0, c.Watermark).UTC().Format(time.RFC3339Nano)
	}
	return slog.GroupValue(slog.Int64("next", c.Next), slog.String("watermark", wm))
}

// Checkpoints are the checkpoints of a partition's stages as a log line
// shows them: a group per stage, keyed by its name, with Checkpoint's
// LogValue (slog resolves a LogValuer attribute, but not the elements of a
// slice, so log a []Checkpoint as Checkpoints(cps)).
type Checkpoints []Checkpoint

// LogValue implements slog.LogValuer.
func (cs Checkpoints) LogValue() slog.Value {
	attrs := make([]slog.Attr, len(cs))
	for i, c := range cs {
		attrs[i] = slog.Any(c.Stage, c)
	}
	return slog.GroupValue(attrs...)
}
