package store

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

func TestOpenPebbleRejectsOtherFormat(t *testing.T) {
	fs := vfs.NewMem()
	pdb, err := pebble.Open("db", &pebble.Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, pdb.Set(metaVersionKey, []byte{0, 0, 0, 9}, pebble.Sync))
	require.NoError(t, pdb.Close())

	_, err = OpenPebble("db", WithFS(fs))
	require.ErrorIs(t, err, ErrCorrupt)
}
