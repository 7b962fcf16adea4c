package attribution_test

import (
	"context"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
)

func velocityConfig() attribution.Config {
	cfg := attribution.DefaultConfig()
	cfg.Velocity = attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: time.Hour, Threshold: 2}
	return cfg
}

func TestVelocityStagePlacement(t *testing.T) {
	stages := attribution.Chain(velocityConfig())
	var names []string
	for _, s := range stages {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"click", "velocity", "install", "purchase"}, names)
	require.NotNil(t, attribution.VelocityOf(stages))
	require.Nil(t, attribution.VelocityOf(attribution.Chain(attribution.DefaultConfig())), "off by default")
	ev := &chain.Event{Decoded: chain.Decoded{Type: attribution.TypeClick}}
	require.True(t, stages[1].Filter(ev))
	ev.Type = attribution.TypeInstall
	require.False(t, stages[1].Filter(ev))
}

// TestVelocityAlertAndRetry: the click that exceeds the threshold emits the
// alert to the alerts topic with its source header; a retried Process of
// it (its first attempt's outputs were discarded) emits the same alert
// again without counting the click or the alert twice; the next click in
// the window raises none.
func TestVelocityAlertAndRetry(t *testing.T) {
	cfg := velocityConfig()
	h := newHarness(t, cfg)
	h.stages = attribution.Chain(cfg, attribution.AlertsTopic("alerts"))
	vp := attribution.VelocityOf(h.stages)
	// run sequences and processes a click in the velocity stage.
	run := func(ev *chain.Event, stream time.Duration) (bool, []chain.Message) {
		pc := chain.NewContext(chain.ContextOptions{Topic: "events", Partition: ev.Partition, Stage: attribution.StageVelocity,
			Offset: ev.Offset, StreamTime: t0.Add(stream), State: h.st})
		skip, err := vp.Sequence(pc, ev)
		require.NoError(t, err)
		if !skip {
			require.NoError(t, vp.Process(context.Background(), pc, ev))
		}
		return skip, pc.Emitted()
	}
	for i, at := range []time.Duration{0, time.Minute} {
		skip, out := run(h.event(int64(i), click("c"+string(rune('1'+i)), "u1", at, "A")), at)
		require.False(t, skip)
		require.Empty(t, out)
	}
	skip, _ := run(h.event(2, click("c1", "u1", 0, "A")), time.Minute)
	require.True(t, skip, "a duplicate")
	third := h.event(3, click("c3", "u1", 2*time.Minute, "A"))
	_, out := run(third, 2*time.Minute)
	want := []chain.Message{{Topic: "alerts", Key: []byte("u1"),
		Value:   []byte(`{"kind":"click_velocity","user_id":"u1","window":"1h","count":3,"time":"2026-11-29T10:02:00.000000000Z","event_id":"c3"}`),
		Headers: []chain.Header{{Key: []byte(attribution.SourceHeader), Value: []byte("3/3")}}}}
	require.Equal(t, want, out)

	pc := chain.NewContext(chain.ContextOptions{Topic: "events", Partition: 3, Stage: attribution.StageVelocity, Offset: 3,
		StreamTime: t0.Add(2 * time.Minute), State: h.st})
	require.NoError(t, vp.Process(context.Background(), pc, third))
	require.Equal(t, want, pc.Emitted(), "a retried Process emits the same alert")
	st := vp.Stats()
	require.EqualValues(t, 1, st.Alerts)
	require.EqualValues(t, 3, st.Counter.Counted)
	require.EqualValues(t, 1, st.Counter.Keys)

	_, out = run(h.event(4, click("c4", "u1", 3*time.Minute, "A")), 3*time.Minute)
	require.Empty(t, out, "one alert per window")

	reg := metrics.NewRegistry()
	unregister := vp.RegisterMetrics(reg)
	require.EqualValues(t, 1, reg.Get("differential.velocity.alerts").(metrics.Gauge).Value())
	require.EqualValues(t, 4, reg.Get("differential.window.velocity.counted").(metrics.Gauge).Value())
	require.EqualValues(t, 1, reg.Get("differential.window.velocity.keys").(metrics.Gauge).Value())
	require.Positive(t, reg.Get("differential.window.velocity.state_bytes").(metrics.Gauge).Value())
	unregister()
	require.Nil(t, reg.Get("differential.velocity.alerts"))
	require.Nil(t, reg.Get("differential.window.velocity.keys"))

	// The velocity stage's keys do not disturb the attribution snapshot.
	require.Empty(t, h.snapshot().Clicks, "no click stage ran")
	require.Len(t, h.snapshot().Seen, 0)
}

func TestVelocityConfigValidate(t *testing.T) {
	ok := attribution.DefaultConfig()
	ok.Velocity = attribution.DefaultVelocity(time.Hour)
	require.NoError(t, ok.Validate())
	require.Equal(t, attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: time.Hour, Threshold: 20}, ok.Velocity)
	for _, tc := range []struct {
		v    attribution.VelocityConfig
		want string
	}{
		{attribution.VelocityConfig{Window: -time.Hour, Bucket: time.Minute, Threshold: 1}, "Window must be >= 0"},
		{attribution.VelocityConfig{Window: time.Hour, Threshold: 1}, "Bucket must be > 0"},
		{attribution.VelocityConfig{Window: time.Hour, Bucket: 7 * time.Minute, Threshold: 1}, "multiple of Bucket"},
		{attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: -1, Threshold: 1}, "Lateness"},
		{attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute}, "Threshold must be >= 1"},
		{attribution.VelocityConfig{Window: 100 * 24 * time.Hour, Bucket: time.Hour, Threshold: 1}, "at most 2160h"},
		{attribution.VelocityConfig{Window: time.Hour, Bucket: time.Millisecond, Threshold: 1}, "coarser Bucket"},
	} {
		cfg := attribution.DefaultConfig()
		cfg.Velocity = tc.v
		require.ErrorContains(t, cfg.Validate(), tc.want, "%+v", tc.v)
	}
}
