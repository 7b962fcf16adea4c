package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "differential.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestBadFlagsAndConfigExitTwo: every bad flag or configuration value exits
// 2 with a message naming the flag or key and what is wrong, before any
// connection is made.
func TestBadFlagsAndConfigExitTwo(t *testing.T) {
	b := "--brokers=localhost:9092"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage: differential <command>"},
		{"unknown command", []string{"serve"}, `unknown command "serve"`},
		{"missing brokers", []string{"run"}, "--brokers is required"},
		{"broker without port", []string{"run", "--brokers", "kafka1"}, `--brokers: "kafka1" is not host:port`},
		{"unknown flag", []string{"run", b, "--bufer", "10"}, "flag provided but not defined: -bufer"},
		{"bad enum", []string{"run", b, "--start", "sideways"}, `invalid value "sideways" for flag -start: must be one of earliest, latest`},
		{"bad int", []string{"run", b, "--buffer", "lots"}, `invalid value "lots" for flag -buffer`},
		{"bad duration", []string{"run", b, "--lookback", "7"}, `invalid value "7" for flag -lookback: not a duration`},
		{"out of range", []string{"run", b, "--offset-distance", "9000"}, "--offset-distance must be >= 0 and smaller than --buffer (8192), got 9000"},
		{"zero lookback", []string{"run", b, "--lookback", "0s"}, "--lookback must be > 0"},
		{"key concurrency", []string{"run", b, "--key-concurrency", "0"}, "--key-concurrency must be in [1, 1024]"},
		{"illegal topic", []string{"run", b, "--output", "a/b"}, `--output: "a/b" is not a legal Kafka topic name`},
		{"output is input", []string{"run", b, "--output", "events"}, "--output and --dlq must differ from the input --topic"},
		{"kafka version", []string{"run", b, "--kafka-version", "0.10.2.0"}, "--kafka-version: 0.10.2.0 is too old"},
		{"stray argument", []string{"run", b, "extra"}, `unexpected argument "extra"`},
		{"log format", []string{"run", b, "--log-format", "xml"}, "must be one of text, json"},
		{"missing config", []string{"run", b, "--config", "/nonexistent/differential.yaml"}, "--config: open /nonexistent/differential.yaml"},
		{"config unknown key", []string{"run", "--config", writeConfig(t, "brokers: [a:1]\n\nbufer: 10\n")},
			`differential.yaml:3: unknown key "bufer" (did you mean "buffer"?)`},
		{"config unrelated key", []string{"run", "--config", writeConfig(t, "zookeeper: a:2181\n")},
			`unknown key "zookeeper" (the keys are the flags' names: alerts, brokers, buffer, commit-interval`},
		{"config bad value", []string{"run", "--config", writeConfig(t, "brokers: a:1\nbuffer: lots\n")},
			`differential.yaml:2: key "buffer": invalid value "lots"`},
		{"config nested", []string{"run", "--config", writeConfig(t, "brokers:\n  main: a:1\n")},
			`key "brokers": must be a plain value or a list, not a mapping`},
		{"config duplicate", []string{"run", "--config", writeConfig(t, "brokers: a:1\nbrokers: b:1\n")},
			`key "brokers" appears twice (first on line 1)`},
		{"config not a mapping", []string{"run", "--config", writeConfig(t, "- a\n- b\n")}, "must be a mapping of flag names to values"},
		{"config syntax", []string{"run", "--config", writeConfig(t, "brokers: [a:1\n")}, "config file"},
		{"config invalid setting", []string{"run", "--config", writeConfig(t, "brokers: a:1\nlateness: -1s\n")}, "--lateness must be >= 0, got -1s"},
		{"config names itself", []string{"run", "--config", writeConfig(t, "config: other.yaml\n")}, `unknown key "config"`},
		{"produce records", []string{"produce", b, "--records", "-1"}, "--records must be >= 0"},
		{"produce brokers", []string{"produce"}, "--brokers is required"},
		{"demo partitions", []string{"demo", "--partitions", "0"}, "--partitions must be in [1, 1000]"},
		{"bench workload", []string{"bench", "--workloads", "A,Z"}, `--workloads: unknown workload "Z"`},
		{"version args", []string{"version", "now"}, `unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, hooks{}, tc.args...)
			require.Equal(t, exitUsage, code, errs)
			require.Contains(t, errs, tc.want)
		})
	}
}

// TestConfigFileAndFlags: the file sets what the flags do not; flags win;
// durations take days; a broker list may be a YAML list.
func TestConfigFileAndFlags(t *testing.T) {
	path := writeConfig(t, `
brokers: [k1:9092, k2:9092]
topic: clicks
group: g1
dlq: ""
lookback: 3d
lateness: 90s
buffer: 1024
key-concurrency: 8
start: latest
metrics-addr: ":9100"
`)
	o, err := parseRunOptions([]string{"--config", path, "--buffer", "2048", "--group", "g2"}, &env{})
	require.NoError(t, err)
	require.Equal(t, []string{"k1:9092", "k2:9092"}, o.brokers)
	require.Equal(t, "clicks", o.topic)
	require.Equal(t, "g2", o.group, "the flag wins")
	require.Equal(t, 2048, o.buffer, "the flag wins")
	require.Equal(t, "", o.dlq)
	require.Equal(t, 72*time.Hour, o.lookback)
	require.Equal(t, 90*time.Second, o.lateness)
	require.Equal(t, 8, o.keyConcurrency)
	require.Equal(t, "latest", o.start)
	require.Equal(t, ":9100", o.metricsAddr)
	require.Equal(t, "attributions", o.output, "default")
	a := o.attribution()
	require.Equal(t, 72*time.Hour, a.DedupHorizon, "the dedup horizon defaults to the lookback")
	require.NoError(t, a.Validate())
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "30s": 30 * time.Second, "0": 0, "1.5h": 90 * time.Minute,
	} {
		got, err := parseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"7", "d", "3x", "99999999d"} {
		_, err := parseDuration(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "7d", formatDuration(7*24*time.Hour))
	require.Equal(t, "1h0m0s", formatDuration(time.Hour))
}

func TestHelpAndVersionExitZero(t *testing.T) {
	code, out, _ := runCLI(t, hooks{}, "run", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "-state-dir directory")
	require.Contains(t, out, `(default "differential-state")`)

	code, out, _ = runCLI(t, hooks{}, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "demo")

	code, out, _ = runCLI(t, hooks{}, "version")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `^differential \S+ .*\(github.com/differential-dev/differential\) go1\.\d+`, out)
}
