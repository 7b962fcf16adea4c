package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/store"
)

// TestTransactionalIDFollowsTheInstanceID: --transactional-id wins; with
// --instance-id (from the flag or DIFFERENTIAL_INSTANCE_ID) the default is
// <group>.<instance id>, the same for a restart on a fresh state directory;
// without either it is <group>.<the state directory's own id>, which a new
// directory changes.
func TestTransactionalIDFollowsTheInstanceID(t *testing.T) {
	b := "--brokers=localhost:9092"
	parse := func(vars map[string]string, args ...string) runOptions {
		t.Helper()
		e := &env{lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
		o, err := parseRunOptions(append([]string{b, "--group", "g"}, args...), e)
		require.NoError(t, err)
		return o
	}
	idIn := func(o runOptions, dir string) string {
		t.Helper()
		db, err := store.OpenPebble(dir)
		require.NoError(t, err)
		defer db.Close()
		id, err := o.transactionalID(db)
		require.NoError(t, err)
		return id
	}

	static := parse(nil, "--instance-id", "pod-3")
	require.Equal(t, "g.pod-3", idIn(static, t.TempDir()))
	require.Equal(t, "g.pod-3", idIn(static, t.TempDir()), "a fresh state directory keeps a static member's transactional id")
	fromEnv := parse(map[string]string{"DIFFERENTIAL_INSTANCE_ID": "pod-4", "DIFFERENTIAL_LEAVE_ON_STOP": "true"})
	require.Equal(t, "pod-4", fromEnv.instanceID)
	require.True(t, fromEnv.leaveOnStop)
	require.Equal(t, "g.pod-4", idIn(fromEnv, t.TempDir()))
	require.Equal(t, "explicit", idIn(parse(nil, "--instance-id", "pod-3", "--transactional-id", "explicit"), t.TempDir()))

	dynamic := parse(nil)
	dir := t.TempDir()
	first := idIn(dynamic, dir)
	require.Regexp(t, `^g\.[0-9a-f]{32}$`, first)
	require.Equal(t, first, idIn(dynamic, dir), "the same state directory, the same id")
	require.NotEqual(t, first, idIn(dynamic, t.TempDir()), "a new state directory is a new instance")
}
