package window

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Name: "v", Window: time.Hour}
	require.NoError(t, ok.Validate())
	c, err := New(ok)
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.Config().Bucket, "default bucket")

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: time.Hour}, "Name"},
		{Config{Name: "a/b", Window: time.Hour}, "Name"},
		{Config{Name: "v"}, "Window must be > 0"},
		{Config{Name: "v", Window: time.Hour, Bucket: -1}, "Bucket must be > 0"},
		{Config{Name: "v", Window: time.Hour, Bucket: 7 * time.Minute}, "multiple of Bucket"},
		{Config{Name: "v", Window: time.Hour, Lateness: -1}, "Lateness"},
		{Config{Name: "v", Window: time.Hour, Bucket: time.Millisecond}, "at most 65536"},
		{Config{Name: "v", Window: 200 * 365 * 24 * time.Hour, Bucket: 200 * 365 * 24 * time.Hour}, "Window+Lateness"},
	} {
		err := tc.cfg.Validate()
		require.ErrorContains(t, err, tc.want, "%+v", tc.cfg)
		_, err = New(tc.cfg)
		require.Error(t, err)
	}
}

func TestDefaultBucket(t *testing.T) {
	for w, want := range map[time.Duration]time.Duration{
		time.Hour:            time.Minute,
		7 * 24 * time.Hour:   time.Hour,
		10 * time.Minute:     10 * time.Second,
		90 * time.Second:     time.Second,
		24 * time.Hour:       15 * time.Minute,
		time.Second:          10 * time.Millisecond,
		59:                   1,
		time.Hour + 1:        1,
		100 * 24 * time.Hour: 24 * time.Hour,
	} {
		b := DefaultBucket(w)
		require.Equal(t, want, b, "window %v", w)
		require.Zero(t, w%b)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour:               "1h",
		90 * time.Minute:        "1h30m",
		10 * time.Minute:        "10m",
		90 * time.Second:        "1m30s",
		time.Hour + time.Second: "1h0m1s",
		1500 * time.Millisecond: "1.5s",
		250 * time.Millisecond:  "250ms",
		24 * time.Hour:          "24h",
	} {
		require.Equal(t, want, FormatDuration(d))
	}
}

// TestAddErrors: times the counter cannot store are Permanent (the record
// is dead-lettered); corrupt state and keys counted out of offset order
// are Fatal.
func TestAddErrors(t *testing.T) {
	c, err := New(Config{Name: "v", Window: time.Hour})
	require.NoError(t, err)
	st := newMemState()
	pc := func(o int64) *chain.Context {
		return chain.NewContext(chain.ContextOptions{Offset: o, State: st})
	}
	ctx := context.Background()
	for _, bad := range []time.Time{{}, time.Unix(0, 0), time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2262, 4, 11, 23, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, err := c.Add(ctx, pc(0), "k", bad)
		require.True(t, chain.IsPermanent(err), "%v: %v", bad, err)
	}
	n, err := c.Add(ctx, pc(5), "k", base)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = c.Add(ctx, pc(4), "k", base)
	require.True(t, chain.IsFatal(err), "%v", err)
	require.True(t, strings.Contains(err.Error(), "offset order"), err.Error())

	st.m[string(c.StateKey("x"))] = memEntry{v: []byte{9, 9}}
	_, err = c.Add(ctx, pc(6), "x", base)
	require.True(t, chain.IsFatal(err), "%v", err)
	for _, v := range [][]byte{{1}, {1, 0}, {1, 0, 2, 0}, {1, 0, 2, 1, 0, 1}, {1, 0, 2, 1, 1}} {
		st.m[string(c.StateKey("x"))] = memEntry{v: v}
		_, err = c.Add(ctx, pc(6), "x", base)
		require.True(t, chain.IsFatal(err), "value %v: %v", v, err)
	}
}
