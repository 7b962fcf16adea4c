package commit

import (
	"fmt"
	"log/slog"
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

// State is what a partition's commit metadata carries: every stage's
// checkpoint and, for a chain whose state has a changelog, the changelog
// offset — the state at these positions is the partition's changelog
// records below it, applied in order.
type State struct {
	Stages []Checkpoint
	// Changelog is the changelog offset, or NoChangelog.
	Changelog int64
	// Idle lists the idle releases decided at the live tail that a replay
	// could not derive from the log (IdleRelease), After increasing, each
	// at or above the committed offset; nil when none. Metadata carrying
	// any is version 4.
	Idle []IdleRelease
}

// NoChangelog is State.Changelog of a chain without a changelog (and of
// version 1 metadata, which cannot carry one).
const NoChangelog int64 = -1

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
