package commit

import (
	"bytes"
	"fmt"
	"log/slog"
	"strconv"
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
