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

// The instance id is created once and survives a reopen of the directory;
// another directory is another instance.
func TestInstanceIDIsKeptInTheStateDirectory(t *testing.T) {
	dir := t.TempDir()
	db, err := OpenPebble(dir)
	require.NoError(t, err)
	id, err := db.InstanceID()
	require.NoError(t, err)
	require.Len(t, id, 32)
	again, err := db.InstanceID()
	require.NoError(t, err)
	require.Equal(t, id, again)
	require.NoError(t, db.Close())

	db, err = OpenPebble(dir)
	require.NoError(t, err)
	reopened, err := db.InstanceID()
	require.NoError(t, err)
	require.Equal(t, id, reopened, "the same state directory is the same instance")
	require.NoError(t, db.Close())

	other, err := OpenPebble(t.TempDir())
	require.NoError(t, err)
	defer other.Close()
	oid, err := other.InstanceID()
	require.NoError(t, err)
	require.NotEqual(t, id, oid)
}

// TestOpenPebbleRefusesOldFormat: a database of format 1 (per-user
// attribution blobs) is refused with ErrOldFormat and a message saying what
// to do, and left as it was.
func TestOpenPebbleRefusesOldFormat(t *testing.T) {
	fs := vfs.NewMem()
	pdb, err := pebble.Open("db", &pebble.Options{FS: fs})
	require.NoError(t, err)
	require.NoError(t, pdb.Set(metaVersionKey, []byte{0, 0, 0, 1}, pebble.Sync))
	require.NoError(t, pdb.Close())

	_, err = OpenPebble("db", WithFS(fs))
	require.ErrorIs(t, err, ErrOldFormat)
	require.ErrorContains(t, err, "format 1, this version reads format 3")
	require.ErrorContains(t, err, "remove the directory")

	pdb, err = pebble.Open("db", &pebble.Options{FS: fs})
	require.NoError(t, err)
	v, closer, err := pdb.Get(metaVersionKey)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0, 1}, v)
	require.NoError(t, closer.Close())
	require.NoError(t, pdb.Close())
}
