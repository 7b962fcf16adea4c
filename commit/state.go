package commit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// State is what a partition's commit metadata carries: every stage's
// checkpoint and, for a chain whose state has a changelog (DESIGN.md
// "State that follows its partition"), the
// changelog offset — the state at these positions is the partition's
// changelog records below it, applied in order.
type State struct {
	Stages []Checkpoint
	// Changelog is the changelog offset, or NoChangelog.
	Changelog int64
}

// NoChangelog is State.Changelog of a chain without a changelog (and of
// version 1 metadata, which cannot carry one).
const NoChangelog int64 = -1

const (
	metadataV2 = "dfl2:"
	// changelogTag opens the changelog section of version 2.
	changelogTag = ";c"
	// maxChangelogLen is the longest changelog section: the tag and 13
	// base-36 digits.
	maxChangelogLen = len(changelogTag) + 13
)

// EncodeState encodes st into the metadata committed next to offset. Without
// a changelog offset it writes version 1, byte for byte what EncodeMetadata
// writes, so that a chain without a changelog keeps its format; with one it
// writes version 2 (see the package doc). Errors as EncodeMetadata, and
// ErrInvalidCheckpoint for a changelog offset below -1.
func EncodeState(offset int64, st State) (string, error) {
	if st.Changelog < NoChangelog {
		return "", fmt.Errorf("%w: changelog offset %d", ErrInvalidCheckpoint, st.Changelog)
	}
	if hasAbove(st.Stages) {
		return encodeV3(offset, st)
	}
	if st.Changelog == NoChangelog {
		return EncodeMetadata(offset, st.Stages)
	}
	if st.Changelog < 0 {
		return "", fmt.Errorf("%w: changelog offset %d", ErrInvalidCheckpoint, st.Changelog)
	}
	md, err := EncodeMetadata(offset, st.Stages)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 0, len(md)+maxChangelogLen)
	buf = append(buf, metadataV2...)
	buf = append(buf, md[len(metadataV1):]...)
	buf = append(buf, changelogTag...)
	buf = strconv.AppendInt(buf, st.Changelog, 36)
	if len(buf) > MaxMetadataLen {
		return "", fmt.Errorf("%w: %d bytes for %d stages (max %d)",
			ErrMetadataTooLarge, len(buf), len(st.Stages), MaxMetadataLen)
	}
	return string(buf), nil
}

// DecodeState decodes metadata of either version written by EncodeState (or
// EncodeMetadata) for these stages next to offset. Version 1 decodes with
// Changelog = NoChangelog. ok is false — never a panic, never an error — for
// anything else, exactly as DecodeMetadata.
func DecodeState(md string, offset int64, stages []string) (st State, ok bool) {
	if strings.HasPrefix(md, metadataV1) {
		cps, ok := decodeV1(md, offset, stages)
		return State{Stages: cps, Changelog: NoChangelog}, ok
	}
	if strings.HasPrefix(md, metadataV3) {
		return decodeV3(md, offset, stages)
	}
	rest, ok := strings.CutPrefix(md, metadataV2)
	if !ok || len(md) > MaxMetadataLen {
		return State{}, false
	}
	body, cl, ok := strings.Cut(rest, changelogTag)
	if !ok {
		return State{}, false
	}
	cps, ok := decodeV1(metadataV1+body, offset, stages)
	if !ok {
		return State{}, false
	}
	n, err := strconv.ParseUint(cl, 36, 63)
	if err != nil || n > math.MaxInt64 {
		return State{}, false
	}
	st = State{Stages: cps, Changelog: int64(n)}
	// Canonical form only, as for version 1.
	if again, err := EncodeState(offset, st); err != nil || again != md {
		return State{}, false
	}
	return st, true
}
