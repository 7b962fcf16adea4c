package main

import (
	"os"
	"path/filepath"
	"strings"
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
		{"unknown flag", []string{"run", b, "--bufer", "10"}, "unknown flag --bufer (did you mean --buffer?)"},
		{"bad enum", []string{"run", b, "--start", "sideways"}, `invalid value "sideways" for flag --start: must be one of earliest, latest`},
		{"bad int", []string{"run", b, "--buffer", "lots"}, `invalid value "lots" for flag --buffer`},
		{"negative budget", []string{"run", b, "--buffer-budget", "-1"}, "--buffer-budget must be >= 0 records (0: none), got -1"},
		{"bad duration", []string{"run", b, "--lookback", "7"}, `invalid value "7" for flag --lookback: not a duration`},
		{"out of range", []string{"run", b, "--offset-distance", "9000"}, "--offset-distance must be >= 0 and smaller than --buffer (8192), got 9000"},
		{"zero lookback", []string{"run", b, "--lookback", "0s"}, "--lookback must be > 0"},
		{"zero metadata refresh", []string{"run", b, "--metadata-refresh", "0s"}, "--metadata-refresh must be between 1s and 24h0m0s, got 0s"},
		{"absurd metadata refresh", []string{"run", b, "--metadata-refresh", "30d"}, "--metadata-refresh must be between 1s and 24h0m0s, got 720h0m0s"},
		{"key concurrency", []string{"run", b, "--key-concurrency", "0"}, "--key-concurrency must be in [1, 1024]"},
		{"gate", []string{"run", b, "--gate", "user"}, `invalid value "user" for flag --gate: must be one of key, partition`},
		{"demo gate", []string{"demo", "--gate", "keys"}, `invalid value "keys" for flag --gate: must be one of key, partition`},
		{"bench gate", []string{"bench", "--gate", ""}, `invalid value "" for flag --gate: must be one of key, partition`},
		{"illegal topic", []string{"run", b, "--output", "a/b"}, `--output: "a/b" is not a legal Kafka topic name`},
		{"output is input", []string{"run", b, "--output", "events"}, "--output and --dlq must differ from the input --topic"},
		{"kafka version", []string{"run", b, "--kafka-version", "0.10.2.0"}, "--kafka-version: 0.10.2.0 is too old"},
		{"stray argument", []string{"run", b, "extra"}, `unexpected argument "extra"`},
		{"log format", []string{"run", b, "--log-format", "xml"}, "must be one of text, json"},
		{"missing config", []string{"run", b, "--config", "/nonexistent/differential.yaml"}, "--config: open /nonexistent/differential.yaml"},
		{"config unknown key", []string{"run", "--config", writeConfig(t, "brokers: [a:1]\n\nbufer: 10\n")},
			`differential.yaml:3: unknown key "bufer" (did you mean "buffer"?)`},
		{"config unrelated key", []string{"run", "--config", writeConfig(t, "zookeeper: a:2181\n")},
			`unknown key "zookeeper" (the keys are the flags' names: advertised-http-addr, alerts, assignor, brokers, buffer, buffer-budget, changelog, changelog-topic, commit-interval`},
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
		{"bad guarantee", []string{"run", b, "--guarantee", "at-most-once"}, `invalid value "at-most-once" for flag --guarantee: must be one of exactly-once, at-least-once`},
		{"bad metadata version", []string{"run", b, "--metadata-version", "1"}, `invalid value "1" for flag --metadata-version: must be one of 2, 3, 4`},
		{"exactly-once without changelog", []string{"run", b, "--guarantee", "exactly-once", "--changelog=false"}, "--guarantee exactly-once (the default) needs --changelog"},
		{"transaction timeout", []string{"run", b, "--guarantee", "exactly-once", "--transaction-timeout", "1s", "--commit-interval", "2s"}, "--transaction-timeout (1s) must exceed --commit-interval (2s)"},
		{"transactional id at-least-once", []string{"run", b, "--guarantee", "at-least-once", "--transactional-id", "x"}, "--transactional-id is for --guarantee exactly-once"},
		{"leave without instance id", []string{"run", b, "--leave-on-stop"}, "--leave-on-stop is for a static member (--instance-id)"},
		{"bad instance id", []string{"run", b, "--instance-id", "pod/0"}, `--instance-id: "pod/0" is not a legal group instance id`},
		{"instance id old protocol", []string{"run", b, "--instance-id", "pod-0", "--kafka-version", "2.2.0"}, "--instance-id needs --kafka-version 2.3.0 or later"},
		{"leave old protocol", []string{"run", b, "--instance-id", "pod-0", "--leave-on-stop", "--kafka-version", "2.3.0"}, "--leave-on-stop needs --kafka-version 2.4.0 or later"},
		{"heartbeat above session", []string{"run", b, "--session-timeout", "6s", "--heartbeat-interval", "6s"}, "--heartbeat-interval must be > 0 and below --session-timeout (6s), got 6s"},
		{"zero session timeout", []string{"run", b, "--session-timeout", "0s"}, "--session-timeout must be > 0"},
		{"config guarantee", []string{"run", "--config", writeConfig(t, "brokers: a:1\nguarantee: exactly-once\nchangelog: false\n")}, "--guarantee exactly-once (the default) needs --changelog"},
		{"produce records", []string{"produce", b, "--records", "-1"}, "--records must be >= 0"},
		{"cert without key", []string{"run", b, "--tls-cert-file", "c.pem"}, "--tls-cert-file and --tls-key-file go together"},
		{"missing CA file", []string{"produce", b, "--tls-ca-file", "/nonexistent/ca.pem"}, "--tls-ca-file: stat /nonexistent/ca.pem"},
		{"CA file not PEM", []string{"run", b, "--tls-ca-file", writeConfig(t, "not a certificate")}, "holds no PEM certificate"},
		{"user without mechanism", []string{"run", b, "--sasl-user", "alice"}, "need --sasl-mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"},
		{"bad mechanism", []string{"run", b, "--sasl-mechanism", "GSSAPI"}, `invalid value "GSSAPI" for flag --sasl-mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER`},
		{"scram without password", []string{"produce", b, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "alice"}, "--sasl-mechanism SCRAM-SHA-512 needs --sasl-user and a password"},
		{"two passwords", []string{"run", b, "--sasl-mechanism", "PLAIN", "--sasl-user", "a", "--sasl-password", "p", "--sasl-password-file", writeConfig(t, "p")}, "two ways to give one password"},
		{"oauth without token", []string{"run", b, "--sasl-mechanism", "OAUTHBEARER"}, "--sasl-mechanism OAUTHBEARER needs --sasl-token-file"},
		{"produce unknown key", []string{"produce", "--config", writeConfig(t, "brokers: a:1\ngroupp: g\n")}, `unknown key "groupp" (did you mean "group"?)`},
		{"produce brokers", []string{"produce"}, "--brokers is required"},
		{"demo partitions", []string{"demo", "--partitions", "0"}, "--partitions must be in [1, 1024]"},
		{"bench workload", []string{"bench", "--workloads", "A,Z"}, `--workloads: unknown workload "Z"`},
		{"bench json folder", []string{"bench", "--json", filepath.Join(writeConfig(t, "a file"), "results", "latest.json")}, "--json: cannot create the folder of"},
		{"bench short run", []string{"bench", "--duration", "1s", "--commit-interval", "200ms"}, "--duration (1s) must be at least 10 × --commit-interval (200ms)"},
		{"bench sweep", []string{"bench", "--sweep", "500,0"}, "--sweep: batch sizes must be > 0"},
		{"bench guarantees without eos-cost", []string{"bench", "--guarantees", "exactly-once"}, "--guarantees is for --eos-cost"},
		{"bench intervals without eos-cost", []string{"bench", "--commit-intervals", "1s"}, "--commit-intervals is for --eos-cost"},
		{"bench unknown guarantee", []string{"bench", "--eos-cost", "--guarantees", "at-least-once,exactly-twice"}, `--guarantees: unknown guarantee "exactly-twice" (want at-least-once or exactly-once)`},
		{"bench guarantee twice", []string{"bench", "--eos-cost", "--guarantees", "exactly-once,exactly-once"}, `--guarantees: "exactly-once" given twice`},
		{"bench bad interval", []string{"bench", "--eos-cost", "--commit-intervals", "100ms,soon"}, `invalid value "100ms,soon" for flag --commit-intervals: not a list of durations`},
		{"bench zero interval", []string{"bench", "--eos-cost", "--commit-intervals", "1s,0s"}, "--commit-intervals: every interval must be > 0, got 0s"},
		{"bench interval twice", []string{"bench", "--eos-cost", "--commit-intervals", "1s,1000ms"}, "--commit-intervals: 1s given twice"},
		{"bench eos-cost workload C", []string{"bench", "--eos-cost", "--workloads", "B,C"}, "--workloads: the exactly-once cost table runs A and B, not C"},
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
gate: partition
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
	require.Equal(t, "partition", o.gate)
	require.Equal(t, "latest", o.start)
	require.Equal(t, ":9100", o.metricsAddr)
	require.Equal(t, "attributions", o.output, "default")
	d, err := parseRunOptions([]string{"--brokers", "k:1"}, &env{})
	require.NoError(t, err)
	require.Equal(t, "key", d.gate, "the attribution chain's default gate scope")
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
	require.Contains(t, out, "\n  --state-dir directory\n")
	require.Contains(t, out, `(default "differential-state")`)
	require.Contains(t, out, "DIFFERENTIAL_<FLAG>")

	code, out, _ = runCLI(t, hooks{}, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "demo")

	code, out, _ = runCLI(t, hooks{}, "version")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `^differential \S+ .*\(github.com/differential-dev/differential\) go1\.\d+`, out)
}

// TestUnknownFlagIsOneLineOnStderr: a bad flag prints the error and one line
// pointing to --help on stderr, nothing on stdout.
func TestUnknownFlagIsOneLineOnStderr(t *testing.T) {
	for _, cmd := range []string{"run", "produce", "demo", "bench", "version"} {
		code, out, errs := runCLI(t, hooks{}, cmd, "--no-such-flag")
		require.Equal(t, exitUsage, code)
		require.Empty(t, out, cmd)
		require.Equal(t, "differential "+cmd+": unknown flag --no-such-flag\nRun 'differential "+cmd+" --help' for usage.\n", errs)
	}
}

// TestHelpSpellsFlagsAsTheREADME: `help <command>` is the command's own
// help; every flag is shown as --name; every default appears at most once;
// and every `differential ...` command of README.md and docs/*.md parses.
func TestHelpSpellsFlagsAsTheREADME(t *testing.T) {
	for _, cmd := range []string{"run", "produce", "demo", "bench", "heavykey"} {
		code, viaHelp, _ := runCLI(t, hooks{}, "help", cmd)
		require.Equal(t, exitOK, code)
		code, out, _ := runCLI(t, hooks{}, cmd, "--help")
		require.Equal(t, exitOK, code)
		require.Equal(t, out, viaHelp, "help %s is %s --help", cmd, cmd)
		_, flags, ok := strings.Cut(out, "\nFlags:\n")
		require.True(t, ok)
		for _, line := range strings.Split(strings.TrimRight(flags, "\n"), "\n") {
			if !strings.HasPrefix(line, "    \t") {
				require.True(t, strings.HasPrefix(line, "  --"), "%s: flag line %q", cmd, line)
			}
			require.LessOrEqual(t, strings.Count(line, "(default"), 1, "%s: %q", cmd, line)
		}
	}
	_, out, _ := runCLI(t, hooks{}, "bench", "-h")
	require.Contains(t, out, "a micro-batch poll waits for a full batch (default 100ms)\n")
	require.NotContains(t, out, "(default 0s)")

	code, _, errs := runCLI(t, hooks{}, "help", "serve")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, `unknown command "serve"`)

	// Every command the README and docs/ show parses against the CLI.
	requireDocCommandsParse(t)
}

// TestSettingsPrecedence: flag > environment > configuration file >
// default, for every setting, the configuration file's path included.
func TestSettingsPrecedence(t *testing.T) {
	path := writeConfig(t, "brokers: [file:1]\ntopic: file-topic\ngroup: file-group\nbuffer: 100\nsasl-user: file-user\nrecords: 5\n")
	vars := map[string]string{
		"DIFFERENTIAL_CONFIG":          path,
		"DIFFERENTIAL_TOPIC":           "env-topic",
		"DIFFERENTIAL_GROUP":           "env-group",
		"DIFFERENTIAL_LOOKBACK":        "2d",
		"DIFFERENTIAL_SASL_MECHANISM":  "SCRAM-SHA-256",
		"DIFFERENTIAL_SASL_PASSWORD":   "env-password",
		"DIFFERENTIAL_STATE_DIR":       "",      // empty: unset
		"DIFFERENTIAL_TEST_BROKERS":    "not:1", // no such flag: ignored
		"DIFFERENTIAL_TLS_SERVER_NAME": "kafka.internal",
	}
	e := &env{lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	o, err := parseRunOptions([]string{"--group", "flag-group"}, e)
	require.NoError(t, err)
	require.Equal(t, "flag-group", o.group, "flag over env")
	require.Equal(t, "env-topic", o.topic, "env over file")
	require.Equal(t, []string{"file:1"}, o.brokers, "file over default")
	require.Equal(t, 100, o.buffer, "file over default")
	require.Equal(t, 48*time.Hour, o.lookback, "env over default")
	require.Equal(t, "differential-state", o.stateDir, "an empty variable is unset")
	require.Equal(t, "SCRAM-SHA-256", o.security.SASL.Mechanism)
	require.Equal(t, "file-user", o.security.SASL.User)
	require.Equal(t, "env-password", string(o.security.SASL.Password))
	require.True(t, o.security.TLS.Enabled(), "--tls-server-name implies TLS")
	require.Equal(t, "kafka.internal", o.security.TLS.ServerName)

	// produce reads the same file and environment; run's keys (group,
	// buffer) are ignored there, produce's (records) in run.
	p := defaultProduceOptions()
	require.NoError(t, func() error {
		fs := newFlagSet("produce", produceSynopsis, e)
		p.register(fs)
		if err := parseFlags(fs, nil); err != nil {
			return err
		}
		_, err := settle(fs, e, &p.config, flagNames(new(runOptions).register))
		return err
	}())
	require.Equal(t, "env-topic", p.topic)
	require.Equal(t, 5, p.records)
	require.Equal(t, []string{"file:1"}, p.brokers)

	vars["DIFFERENTIAL_BUFFER"] = "lots"
	_, err = parseRunOptions(nil, e)
	require.ErrorContains(t, err, `environment variable DIFFERENTIAL_BUFFER (--buffer): invalid value "lots"`)
}

// TestSecretsNeverEchoed: a password given by flag, environment or file
// appears in no error and no help text.
func TestSecretsNeverEchoed(t *testing.T) {
	const pw = "Hunter2-secret"
	b := "--brokers=localhost:9092"
	for _, args := range [][]string{
		{"run", b, "--sasl-password", pw},                                  // no mechanism
		{"run", b, "--sasl-password", pw, "--sasl-mechanism", "PLAIN"},     // no user
		{"produce", b, "--sasl-password", pw, "--sasl-password-file", "x"}, // two passwords
		{"run", b, "--sasl-password", pw, "--buffer", "x"},
		{"run", b, "--sasl-password", pw, "-h"},
		{"produce", b, "--sasl-password", pw, "--help"},
	} {
		_, out, errs := runCLI(t, hooks{}, args...)
		require.NotContains(t, out+errs, pw, "%v", args)
	}
	path := writeConfig(t, "brokers: a:1\nsasl-password: "+pw+"\n")
	_, err := parseRunOptions([]string{"--config", path}, &env{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), pw)
}
