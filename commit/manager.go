package commit

import (
	"fmt"
	"slices"
)

// Manager is the commit state of one partition for one group generation: it
// computes what to commit from the stages' checkpoints and guards I3 (the
// committed offset never exceeds any stage's position and never moves
// backwards).
//
// A Manager is not safe for concurrent use; the caller serialises.
type Manager struct {
	stages []string
	offset int64 // last committed offset; -1 if none
	md     string
	// floors[i] is the lowest position stage i may report: the larger of the
	// last committed offset and its position in the last committed metadata.
	floors []int64
	// clFloor is the lowest changelog offset a commit may carry: the one in
	// the last committed metadata (NoChangelog if none).
	clFloor int64
}

// NewManager returns the commit state of a partition whose chain has these
// stages (see ValidateStages) and whose committed offset at assignment is
// committed (-1 if none). To also hold each stage to the position recorded in
// the metadata read at assignment — and to have Next report changed=false
// while nothing moved — call Committed(committed, thatMetadata) right after.
func NewManager(stages []string, committed int64) *Manager {
	m := &Manager{
		stages:  slices.Clone(stages),
		offset:  committed,
		floors:  make([]int64, len(stages)),
		clFloor: NoChangelog,
	}
	for i := range m.floors {
		m.floors[i] = committed
	}
	return m
}

// Next returns the offset to commit — the minimum of the stages' positions —
// and the metadata to commit with it, given every stage's current checkpoint
// in the Manager's stage order. changed is false when neither the offset nor
// the metadata differs from the last Committed ones (nothing to commit). Next
// does not change the Manager.
//
// Errors: a *RegressionError (wrapping ErrRegression) if any stage's position
// is below the last committed offset or below its position in the last
// committed metadata — the minimum would then move backwards, or a stage
// would resume before a point it had already committed; ErrStageMismatch if
// cps does not name the Manager's stages in order; ErrMetadataTooLarge and
// ErrInvalidCheckpoint from EncodeMetadata. On error the other results are
// zero.
func (m *Manager) Next(cps []Checkpoint) (offset int64, md string, changed bool, err error) {
	return m.NextState(State{Stages: cps, Changelog: NoChangelog})
}

// NextState is Next for a chain with a changelog: the metadata also carries
// st.Changelog (version 2). A changelog offset below the one last committed
// is a *RegressionError too: the committed state would go back in time.
func (m *Manager) NextState(st State) (offset int64, md string, changed bool, err error) {
	cps := st.Stages
	if st.Changelog < m.clFloor {
		return 0, "", false, &RegressionError{Stage: "changelog", Next: st.Changelog, Floor: m.clFloor, Committed: m.offset}
	}
	if len(cps) != len(m.stages) {
		return 0, "", false, fmt.Errorf("%w: %d checkpoints for %d stages", ErrStageMismatch, len(cps), len(m.stages))
	}
	for i, cp := range cps {
		if cp.Stage != m.stages[i] {
			return 0, "", false, fmt.Errorf("%w: checkpoint %d is stage %q, want %q", ErrStageMismatch, i, cp.Stage, m.stages[i])
		}
		if cp.Next < m.floors[i] {
			return 0, "", false, &RegressionError{Stage: cp.Stage, Next: cp.Next, Floor: m.floors[i], Committed: m.offset}
		}
		if i == 0 || cp.Next < offset {
			offset = cp.Next
		}
	}
	if md, err = EncodeState(offset, st); err != nil {
		return 0, "", false, err
	}
	return offset, md, offset != m.offset || md != m.md, nil
}

// Committed records that Kafka acknowledged the commit of (offset, md). An
// acknowledgement for an offset below the last committed one is stale (a
// reordered reply) and is ignored: the Manager's view never moves backwards.
// md is decoded to raise each stage's floor to its committed position;
// metadata this package cannot decode raises it to offset only.
func (m *Manager) Committed(offset int64, md string) {
	if offset < m.offset {
		return
	}
	m.offset, m.md = offset, md
	st, ok := DecodeState(md, offset, m.stages)
	for i := range m.floors {
		floor := offset
		if ok {
			floor = st.Stages[i].Next
		}
		m.floors[i] = max(m.floors[i], floor)
	}
	if ok {
		m.clFloor = max(m.clFloor, st.Changelog)
	}
}

// Stages returns a copy of the stage names, in order.
func (m *Manager) Stages() []string { return slices.Clone(m.stages) }
