package store

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

func TestPebbleLogsGoToSlog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	fs := vfs.NewMem()
	for range 2 { // the second open replays a WAL and says so
		db, err := OpenPebble("db", WithFS(fs), WithLogger(l))
		require.NoError(t, err)
		require.NoError(t, db.Close())
	}
	require.Contains(t, buf.String(), "level=INFO msg=\"Found 1 WALs\" component=pebble")
}

func TestSlogLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slogLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))}
	l.Infof("dropped %d", 1)
	require.Empty(t, buf.String(), "below the handler's level")
	l.Errorf("bad %s\n", "thing")
	require.Contains(t, buf.String(), `level=ERROR msg="bad thing"`)
	require.PanicsWithValue(t, "store: pebble fatal: corrupt 7", func() { l.Fatalf("corrupt %d", 7) })
	require.Contains(t, buf.String(), `msg="corrupt 7" fatal=true`)
}
