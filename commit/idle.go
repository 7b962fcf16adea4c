package commit

import (
	"fmt"
	"strconv"
	"strings"
)

// IdleRelease is an idle release the chain decided at the live tail from
// its own clock (DESIGN.md "Recorded idle releases"): the log's end was
// confirmed more than the idle timeout after the timestamp of record
// After, and the follower Stage was released against its leader's
// position After+1. With CreateTime timestamps behind the engine's clock
// the next record's timestamp may not show that gap, so a replay could
// not derive the decision from the log: the metadata carries it, and a
// restored partition applies it instead of deciding again.
type IdleRelease struct {
	// Stage is the follower stage whose gate took the decision.
	Stage string
	// After is the offset of the record after which the leader was
	// declared idle: the follower records up to it that its gate holds
	// are released against the leader position After+1.
	After int64
	// LeaderNext and LeaderWatermark are the leader's checkpoint
	// (position, unix-nanosecond watermark; 0 none) when the decision was
	// taken; LeaderNext > After.
	LeaderNext      int64
	LeaderWatermark int64
}

const (
	// idleTag opens an idle section (version 4): ";i" stage "=" after
	// "." leader [ "." watermark ].
	idleTag = ";i"
	// maxIdleLen is the longest idle section: the tag, a stage index (2
	// base-36 digits), "=", after and leader (13 digits each, with their
	// separator) and "." "-" watermark.
	maxIdleLen = len(idleTag) + 2 + 1 + 13 + 1 + 13 + 1 + 1 + 13
)

// MaxIdleReleases is the most idle releases a State carries: the chain
// drops a release once the committed offset passes its After, and takes
// no new one at the live tail while this many are at or above it.
const MaxIdleReleases = 4

// IdleReleaseCap returns how many idle releases the metadata of stages
// stages always has room for, whatever the positions, watermarks and
// changelog offset: MaxIdleReleases up to 27 stages, fewer above (0 for
// 34). The room is kept free of above sets (MaxAboveSpan).
func IdleReleaseCap(stages int) int {
	if stages <= 0 || stages > MaxStages {
		return 0
	}
	free := MaxMetadataLen - (tagLen + hashLen + 1 + stages*maxStageLen - 1 + maxChangelogLen)
	return max(0, min(MaxIdleReleases, free/maxIdleLen))
}

// validIdle reports whether rs can be encoded for these stages next to
// offset: strictly increasing After, each at or above offset, a leader
// position past it, a stage of the list.
func validIdle(offset int64, cps []Checkpoint, rs []IdleRelease) error {
	if len(rs) > IdleReleaseCap(len(cps)) {
		return fmt.Errorf("%w: %d idle releases for %d stages (at most %d fit)", ErrMetadataTooLarge, len(rs), len(cps), IdleReleaseCap(len(cps)))
	}
	prev := offset - 1
	for _, r := range rs {
		if r.After <= prev || r.LeaderNext <= r.After || stageIndex(cps, r.Stage) < 0 {
			return fmt.Errorf("%w: idle release after %d (stage %q, leader at %d): not increasing, below the committed offset %d, leader not past it, or an unknown stage",
				ErrInvalidCheckpoint, r.After, r.Stage, r.LeaderNext, offset)
		}
		prev = r.After
	}
	return nil
}

func stageIndex(cps []Checkpoint, name string) int {
	for i := range cps {
		if cps[i].Stage == name {
			return i
		}
	}
	return -1
}

// appendIdle appends the idle section of r (validIdle holds).
func appendIdle(buf []byte, offset int64, cps []Checkpoint, r IdleRelease) []byte {
	buf = append(buf, idleTag...)
	buf = strconv.AppendInt(buf, int64(stageIndex(cps, r.Stage)), 36)
	buf = append(buf, '=')
	buf = strconv.AppendInt(buf, r.After-offset, 36)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, r.LeaderNext-r.After-1, 36)
	if r.LeaderWatermark != 0 {
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, r.LeaderWatermark, 36)
	}
	return buf
}

// decodeIdleSection parses "i" stage "=" after "." leader [ "." watermark ]
// (the section without its leading ";"); the canonical-form check of
// DecodeState rejects what the encoder would not write (order, zeros).
func decodeIdleSection(p string, offset int64, cps []Checkpoint) (IdleRelease, bool) {
	a, ok := strings.CutPrefix(p, "i")
	if !ok {
		return IdleRelease{}, false
	}
	idx, rest, ok := strings.Cut(a, "=")
	if !ok {
		return IdleRelease{}, false
	}
	i, err := strconv.ParseUint(idx, 36, 16)
	if err != nil || int(i) >= len(cps) {
		return IdleRelease{}, false
	}
	fields := strings.Split(rest, ".")
	if len(fields) < 2 || len(fields) > 3 {
		return IdleRelease{}, false
	}
	after, err := strconv.ParseUint(fields[0], 36, 63)
	if err != nil || int64(after) > maxInt64-offset {
		return IdleRelease{}, false
	}
	r := IdleRelease{Stage: cps[i].Stage, After: offset + int64(after)}
	lead, err := strconv.ParseUint(fields[1], 36, 63)
	if err != nil || int64(lead) > maxInt64-r.After-1 {
		return IdleRelease{}, false
	}
	r.LeaderNext = r.After + 1 + int64(lead)
	if len(fields) == 3 {
		if r.LeaderWatermark, err = strconv.ParseInt(fields[2], 36, 64); err != nil {
			return IdleRelease{}, false
		}
	}
	return r, true
}

const maxInt64 = 1<<63 - 1
