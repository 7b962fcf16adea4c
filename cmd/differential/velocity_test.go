package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/processors/attribution"
)

// TestVelocityFlags: the velocity stage is off by default; its flags and
// configuration keys set it up; the others need --velocity-window; bad
// values exit 2 naming the flag.
func TestVelocityFlags(t *testing.T) {
	b := "--brokers=localhost:9092"
	o, err := parseRunOptions([]string{b}, &env{})
	require.NoError(t, err)
	require.False(t, o.attribution().Velocity.Enabled(), "off by default")

	o, err = parseRunOptions([]string{b, "--velocity-window", "1h"}, &env{})
	require.NoError(t, err)
	require.Equal(t, attribution.VelocityConfig{Window: time.Hour, Bucket: time.Minute, Lateness: time.Hour, Threshold: 20},
		o.attribution().Velocity)
	require.Equal(t, "", o.engineSettings.alerts, "alerts to the output topic")

	path := writeConfig(t, "brokers: [k1:9092]\nvelocity-window: 2h\nvelocity-threshold: 50\nvelocity-bucket: 5m\nvelocity-lateness: 0s\nalerts: spam-alerts\n")
	o, err = parseRunOptions([]string{"--config", path, "--velocity-threshold", "30"}, &env{})
	require.NoError(t, err)
	require.Equal(t, attribution.VelocityConfig{Window: 2 * time.Hour, Bucket: 5 * time.Minute, Lateness: 0, Threshold: 30},
		o.attribution().Velocity, "file keys, the flag wins, an explicit zero lateness")
	require.Equal(t, "spam-alerts", o.engineSettings.alerts)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{b, "--velocity-threshold", "5"}, "--velocity-threshold needs --velocity-window"},
		{[]string{b, "--alerts", "spam"}, "--alerts needs --velocity-window"},
		{[]string{"--config", writeConfig(t, "brokers: a:1\nvelocity-bucket: 1m\n")}, "--velocity-bucket needs --velocity-window"},
		{[]string{b, "--velocity-window", "-1h"}, "--velocity-window must be >= 0"},
		{[]string{b, "--velocity-window", "1h", "--velocity-threshold", "0"}, "--velocity-threshold must be >= 1"},
		{[]string{b, "--velocity-window", "1h", "--velocity-bucket", "7m"}, "--velocity-bucket must be > 0 and divide --velocity-window 1h, got 7m"},
		{[]string{b, "--velocity-window", "1h", "--velocity-lateness", "-1s"}, "--velocity-lateness must be >= 0"},
		{[]string{b, "--velocity-window", "1h", "--alerts", "a/b"}, `--alerts: "a/b" is not a legal Kafka topic name`},
		{[]string{b, "--velocity-window", "1h", "--alerts", "events"}, "--alerts must differ from the input --topic"},
		{[]string{b, "--velocity-window", "100d"}, "Velocity.Window+Lateness must be at most 2160h"},
		{[]string{b, "--velocity-window", "1h", "--velocity-bucket", "1ms"}, "use a coarser Bucket"},
		{[]string{"demo", "--velocity-threshold", "3"}, "--velocity-threshold needs --velocity-window"},
		{[]string{"demo", "--velocity-window", "1h", "--alerts", "events"}, "--alerts must differ from the demo's input"},
	} {
		args := tc.args
		if args[0] != "demo" {
			args = append([]string{"run"}, args...)
		}
		code, _, errs := runCLI(t, hooks{}, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errs)
		require.Contains(t, errs, tc.want, "%v", args)
	}
}

// TestDemoVerifiesAlerts runs the demo with the velocity stage: the
// workload has click spam, the alerts equal the model's.
func TestDemoVerifiesAlerts(t *testing.T) {
	code, out, errs := runCLI(t, hooks{}, "demo", "--records", "8000", "--partitions", "3", "--key-concurrency", "4",
		"--velocity-window", "1h", "--velocity-threshold", "15")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "through 4 stages")
	require.Regexp(t, `alerts\s+[1-9][\d,]* click-velocity alerts to velocity-alerts \(window 1h, bucket 1m, lateness 1h, alert above 15 clicks\)`, out)
	require.Regexp(t, `verification    OK: .*velocity alerts equal too \([1-9]`, out)
	require.Contains(t, errs, "velocity pos 8,000")
}

// TestRunReportsMissingAlertsTopic: like the other topics, --alerts must
// exist; the message names it and its flag.
func TestRunReportsMissingAlertsTopic(t *testing.T) {
	tp := newTopics(t, 1)
	args := append(tp.runArgs(), "--velocity-window", "1h", "--alerts", "no-such-alerts-"+tp.group)
	code, _, errs := runCLI(t, hooks{}, args...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, `topic "no-such-alerts-`+tp.group+`" (--alerts) does not exist`)
}

// TestVelocityMetrics: with the velocity stage, /metrics serves its alert
// count and its counter's records counted, keys tracked and state size.
func TestVelocityMetrics(t *testing.T) {
	tp := newTopics(t, 2)
	// The input of TestMetricsAndHealth: no record is dated after this
	// machine's clock, which a real broker would refuse
	// (log.message.timestamp.after.max.ms).
	tp.produce(t, 3000, 5)
	_, ends := tp.input(t)
	addrs := make(chan string, 1)
	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: w.member().options(), metricsListening: func(a string) { addrs <- a }},
		tp.runArgs("--metrics-addr", "127.0.0.1:0", "--velocity-window", "1d", "--velocity-threshold", "2")...)
	base := "http://" + recv(t, addrs, "the metrics server")
	recv(t, w.reach(ends), "the group to commit every partition's end")
	status, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	fams, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	value := func(name string) float64 {
		f, ok := fams[name]
		require.True(t, ok, "series %s in:\n%s", name, body)
		m := f.GetMetric()[0]
		if m.Counter != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	require.Positive(t, value("differential_velocity_alerts_total"))
	require.Positive(t, value("differential_window_counted_total"))
	require.Positive(t, value("differential_window_keys"))
	require.Positive(t, value("differential_window_state_bytes"))
	require.Contains(t, body, `differential_window_keys{window="velocity"}`)
	require.Contains(t, body, `stage="velocity"`)
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
}
