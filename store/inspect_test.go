package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/commit"
)

func TestEntriesListsPersistedState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		ps := h.open(t, 0, []string{"a"})
		require.NoError(t, ps.Stage(0).Set(1, []byte("x"), []byte("1"), time.Time{}))
		require.NoError(t, ps.Stage(0).Set(2, []byte("y"), []byte("2"), time.Time{}))
		require.NoError(t, ps.Checkpoint([]commit.Checkpoint{{Stage: "a", Next: 2}}, time.Time{}))
		got, err := h.engine().Entries(topic, 0)
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"x": []byte("1")}, got, "only the write below the checkpoint is persisted")
		other, err := h.engine().Entries(topic, 1)
		require.NoError(t, err)
		require.Empty(t, other)
	})
}
