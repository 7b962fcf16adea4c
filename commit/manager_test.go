package commit

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestManagerMinOfStages(t *testing.T) {
	m := NewManager(chainStages, 100)
	cps := checkpoints(chainStages, 150, 9, 120, 8, 130, 7)
	offset, md, changed, err := m.Next(cps)
	require.NoError(t, err)
	assert.Equal(t, int64(120), offset, "the slowest stage, wherever it is in the chain")
	assert.True(t, changed)
	got, ok := DecodeMetadata(md, offset, chainStages)
	require.True(t, ok)
	assert.Equal(t, cps, got, "the metadata carries every stage's checkpoint")
}

func TestManagerChanged(t *testing.T) {
	m := NewManager(chainStages, 100)
	off, md := m.offset, m.md
	assert.Equal(t, int64(100), off)
	assert.Empty(t, md)

	cps := checkpoints(chainStages, 100, 0, 100, 0, 100, 0)
	offset, md, changed, err := m.Next(cps)
	require.NoError(t, err)
	assert.Equal(t, int64(100), offset)
	assert.True(t, changed, "same offset, but the metadata committed at assignment is unknown")

	_, _, changed, err = m.Next(cps)
	require.NoError(t, err)
	assert.True(t, changed, "Next alone records nothing")

	m.Committed(offset, md)
	gotOff, gotMD := m.offset, m.md
	assert.Equal(t, offset, gotOff)
	assert.Equal(t, md, gotMD)
	_, _, changed, err = m.Next(cps)
	require.NoError(t, err)
	assert.False(t, changed, "nothing moved since the commit")

	cps[1].Watermark = 5 // metadata only
	off2, md2, changed, err := m.Next(cps)
	require.NoError(t, err)
	assert.Equal(t, offset, off2)
	assert.NotEqual(t, md, md2)
	assert.True(t, changed, "a watermark moved")
	m.Committed(off2, md2)

	cps[0].Next, cps[1].Next, cps[2].Next = 110, 105, 101 // offset moves
	off3, _, changed, err := m.Next(cps)
	require.NoError(t, err)
	assert.Equal(t, int64(101), off3)
	assert.True(t, changed)
}

// Committing the metadata read at assignment makes an unchanged chain report
// changed=false.
func TestManagerAssignmentMetadata(t *testing.T) {
	cps := checkpoints(chainStages, 130, 0, 120, 0, 100, 0)
	md, err := EncodeMetadata(100, cps)
	require.NoError(t, err)
	m := NewManager(chainStages, 100)
	m.Committed(100, md)
	_, _, changed, err := m.Next(cps)
	require.NoError(t, err)
	assert.False(t, changed)

	// The committed metadata holds install at 120: going back to 110 would
	// reprocess (and duplicate) what was committed as done.
	cps[1].Next = 110
	_, _, _, err = m.Next(cps)
	assertRegression(t, err, "install", 110, 120, 100)
}

func TestManagerRegression(t *testing.T) {
	m := NewManager(chainStages, 100)
	cps := checkpoints(chainStages, 150, 0, 140, 0, 130, 0)
	offset, md, _, err := m.Next(cps)
	require.NoError(t, err)
	m.Committed(offset, md)

	// The minimum would move back below the committed offset.
	_, _, _, err = m.Next(checkpoints(chainStages, 150, 0, 140, 0, 129, 0))
	assertRegression(t, err, "purchase", 129, 130, 130)

	// The minimum stays, but a stage falls below its committed position.
	_, _, _, err = m.Next(checkpoints(chainStages, 149, 0, 140, 0, 130, 0))
	assertRegression(t, err, "click", 149, 150, 130)

	// A stale acknowledgement does not move the Manager back.
	m.Committed(120, "")
	gotOff, gotMD := m.offset, m.md
	assert.Equal(t, int64(130), gotOff)
	assert.Equal(t, md, gotMD)
	_, _, _, err = m.Next(checkpoints(chainStages, 150, 0, 140, 0, 125, 0))
	assertRegression(t, err, "purchase", 125, 130, 130)

	// Metadata that cannot be decoded lowers no floor.
	m.Committed(130, "")
	_, _, _, err = m.Next(checkpoints(chainStages, 149, 0, 140, 0, 130, 0))
	assertRegression(t, err, "click", 149, 150, 130)

	_, _, _, err = m.Next(checkpoints(chainStages, 150, 0, 140, 0, 130, 0))
	assert.NoError(t, err)
}

func assertRegression(t *testing.T, err error, stage string, next, floor, committed int64) {
	t.Helper()
	require.ErrorIs(t, err, ErrRegression)
	var re *RegressionError
	require.True(t, errors.As(err, &re))
	assert.Equal(t, RegressionError{Stage: stage, Next: next, Floor: floor, Committed: committed}, *re)
	assert.Contains(t, err.Error(), stage)
}

func TestManagerNoCommittedOffset(t *testing.T) {
	m := NewManager(chainStages, -1)
	off := m.offset
	assert.Equal(t, int64(-1), off)
	offset, _, changed, err := m.Next(checkpoints(chainStages, 0, 0, 0, 0, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, int64(0), offset)
	assert.True(t, changed)
}

func TestManagerStageMismatch(t *testing.T) {
	m := NewManager(chainStages, 0)
	for name, cps := range map[string][]Checkpoint{
		"fewer":     checkpoints(chainStages[:2], 0, 0, 0, 0),
		"reordered": checkpoints([]string{"install", "click", "purchase"}, 0, 0, 0, 0, 0, 0),
		"none":      nil,
	} {
		_, _, _, err := m.Next(cps)
		assert.ErrorIs(t, err, ErrStageMismatch, name)
	}
}

func TestManagerCopiesStages(t *testing.T) {
	stages := []string{"a", "b"}
	m := NewManager(stages, 0)
	stages[0] = "z"
	m.Stages()[1] = "y"
	assert.Equal(t, []string{"a", "b"}, m.Stages())
}

func TestManagerChangelog(t *testing.T) {
	m := NewManager(chainStages, 100)
	st := State{Stages: checkpoints(chainStages, 110, 0, 105, 0, 100, 0), Changelog: 40}
	off, md, changed, err := m.NextState(st)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, int64(100), off)
	got, ok := DecodeState(md, off, chainStages)
	require.True(t, ok)
	assert.Equal(t, st, got)
	m.Committed(off, md)

	_, _, changed, err = m.NextState(st)
	require.NoError(t, err)
	assert.False(t, changed)

	st.Changelog = 45 // state written, positions unchanged: still a commit
	_, _, changed, err = m.NextState(st)
	require.NoError(t, err)
	assert.True(t, changed)

	st.Changelog = 39
	_, _, _, err = m.NextState(st)
	var re *RegressionError
	require.ErrorAs(t, err, &re, "the committed changelog offset never goes back")
	assert.Equal(t, "changelog", re.Stage)

	// Metadata committed at assignment raises the floor too.
	m = NewManager(chainStages, 100)
	m.Committed(off, md)
	_, _, _, err = m.NextState(State{Stages: st.Stages, Changelog: 10})
	require.ErrorIs(t, err, ErrRegression)
}
