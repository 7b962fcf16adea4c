package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mapEnv is an environment of vars, listed and looked up as the binary's.
func mapEnv(vars map[string]string) *env {
	e := &env{
		lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		environ: func() []string {
			var kv []string
			for k, v := range vars {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
	}
	return e
}

// TestPrintConfig: run --print-config prints every setting with the source
// of its value — flag, environment variable, configuration file and line,
// or default — redacts the password, connects to nothing and exits 0; its
// output, as a --config file, gives the same settings.
func TestPrintConfig(t *testing.T) {
	const pw = "Hunter2-secret"
	path := writeConfig(t, "topic: file-topic\nlookback: 2d\nbuffer: 100\n")
	e := mapEnv(map[string]string{
		"DIFFERENTIAL_BUFFER":         "200", // below the file's: the environment wins
		"DIFFERENTIAL_SASL_PASSWORD":  pw,
		"DIFFERENTIAL_SASL_MECHANISM": "PLAIN",
		"DIFFERENTIAL_SASL_USER":      "bob",
		"DIFFERENTIAL_TEST_BROKERS":   "127.0.0.1:1", // no setting, allowed
	})
	var out, errb bytes.Buffer
	e.stdout, e.stderr = &out, &errb
	code := cli(t.Context(), []string{"run", "--brokers", "unreachable.invalid:9092", "--config", path, "--group", "g1", "--print-config"}, e)
	require.Equal(t, exitOK, code, errb.String())
	got := out.String()
	require.NotContains(t, got+errb.String(), pw)
	for _, line := range []string{
		`brokers: "unreachable.invalid:9092" # flag`,
		`group: "g1" # flag`,
		`buffer: "200" # environment variable DIFFERENTIAL_BUFFER`,
		`sasl-user: "bob" # environment variable DIFFERENTIAL_SASL_USER`,
		`sasl-password: "<redacted>" # environment variable DIFFERENTIAL_SASL_PASSWORD, redacted`,
		`topic: "file-topic" # config file ` + path + `:1`,
		`lookback: "2d" # config file ` + path + `:2`,
		`# output: "attributions" # default`,
		`# state-dir: "differential-state" # default`,
		`# config: "` + path + `" (flag)`,
	} {
		require.Contains(t, got, line+"\n", got)
	}
	require.NotContains(t, got, "print-config")

	// Read back as a file (without the redacted password), it gives the
	// same configuration.
	printed := writeConfig(t, strings.ReplaceAll(got, `sasl-password: "<redacted>"`, "sasl-password: "+pw))
	o, err := parseRunOptions([]string{"--config", printed}, &env{})
	require.NoError(t, err)
	want, err := parseRunOptions([]string{"--brokers", "unreachable.invalid:9092", "--config", path, "--group", "g1"}, mapEnv(map[string]string{
		"DIFFERENTIAL_BUFFER": "200", "DIFFERENTIAL_SASL_PASSWORD": pw, "DIFFERENTIAL_SASL_MECHANISM": "PLAIN", "DIFFERENTIAL_SASL_USER": "bob"}))
	require.NoError(t, err)
	o.config, want.config = "", ""
	o.sources, want.sources = nil, nil
	require.Equal(t, want, o)

	// An invalid configuration is printed too, and fails as it would.
	out.Reset()
	errb.Reset()
	code = cli(t.Context(), []string{"run", "--brokers", "a:1", "--buffer", "1", "--print-config"}, e)
	require.Equal(t, exitUsage, code)
	require.Contains(t, out.String(), `buffer: "1" # flag`)
	require.Contains(t, errb.String(), "--buffer must be at least 2")
}

// TestUnknownEnvironmentVariables: a DIFFERENTIAL_* variable that is no
// setting of run or produce is refused, naming the closest setting's
// variable; the other command's settings, the non-setting names of
// notSettings and empty variables pass.
func TestUnknownEnvironmentVariables(t *testing.T) {
	base := map[string]string{
		"DIFFERENTIAL_BROKERS":      "a:1",
		"DIFFERENTIAL_RECORDS":      "5", // produce's
		"DIFFERENTIAL_TEST_BROKERS": "b:1",
		"DIFFERENTIAL_KAFKA_PORT":   "11100",
		"DIFFERENTIAL_SOAK":         "1",
		"DIFFERENTIAL_UNUSED":       "", // empty: unset
		"OTHER_BUFER":               "x",
	}
	_, err := parseRunOptions(nil, mapEnv(base))
	require.NoError(t, err)

	base["DIFFERENTIAL_BUFER"] = "5"
	_, err = parseRunOptions(nil, mapEnv(base))
	require.EqualError(t, err, "environment variable DIFFERENTIAL_BUFER is no setting (did you mean DIFFERENTIAL_BUFFER, --buffer?)")
	var out, errb bytes.Buffer
	e := mapEnv(base)
	e.stdout, e.stderr = &out, &errb
	require.Equal(t, exitUsage, cli(t.Context(), []string{"produce"}, e), "produce refuses it too")
	require.Contains(t, errb.String(), "DIFFERENTIAL_BUFER is no setting")

	base["DIFFERENTIAL_ZZZZZZZZ"] = "1"
	_, err = parseRunOptions(nil, mapEnv(base))
	require.EqualError(t, err, "environment variable DIFFERENTIAL_BUFER is no setting (did you mean DIFFERENTIAL_BUFFER, --buffer?); also unknown: DIFFERENTIAL_ZZZZZZZZ")
	delete(base, "DIFFERENTIAL_BUFER")
	_, err = parseRunOptions(nil, mapEnv(base))
	require.ErrorContains(t, err, "environment variable DIFFERENTIAL_ZZZZZZZZ is no setting (the variables are DIFFERENTIAL_<FLAG>")
	delete(base, "DIFFERENTIAL_ZZZZZZZZ")

	// --print-config is asked on the command line only: from the
	// environment it would turn every start into a print.
	base["DIFFERENTIAL_PRINT_CONFIG"] = "true"
	_, err = parseRunOptions(nil, mapEnv(base))
	require.ErrorContains(t, err, "environment variable DIFFERENTIAL_PRINT_CONFIG is no setting")
	delete(base, "DIFFERENTIAL_PRINT_CONFIG")
	_, err = parseRunOptions([]string{"--config", writeConfig(t, "print-config: true\n")}, mapEnv(base))
	require.ErrorContains(t, err, `unknown key "print-config"`)
}

// docTypos are the mistyped variables the documentation shows refused.
var docTypos = map[string]bool{"DIFFERENTIAL_BUFER": true}

// TestNotSettingsCoverTheRepository: every DIFFERENTIAL_* name in the
// repository (tests, scripts, CI, docs) is a setting of run or produce or
// in notSettings, so no test or script that runs the binary with its
// environment is refused.
func TestNotSettingsCoverTheRepository(t *testing.T) {
	settings := map[string]bool{}
	for name := range flagNames(new(runOptions).register) {
		settings[envName(name)] = true
	}
	for name := range flagNames(new(produceOptions).register) {
		settings[envName(name)] = true
	}
	re := regexp.MustCompile(`DIFFERENTIAL_[A-Z0-9_]*[A-Z0-9](_\*)?`)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	found := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") && n != ".ci" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 1<<20 || d.Name() == "settings_test.go" {
			return err // this file's names are made up to be refused
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllString(string(b), -1) {
			found[m] = path
		}
		return nil
	}))
	require.Contains(t, found, "DIFFERENTIAL_TEST_BROKERS", "the walk reads the repository")
	for name, path := range found {
		if strings.HasSuffix(name, "_*") || docTypos[name] { // a family of names in prose, a typo shown
			continue
		}
		require.True(t, settings[name] || notSettings[name],
			"%s (in %s) is no setting of run or produce: add it to notSettings if tests or scripts set it", name, path)
	}
}

// TestErrorsNameTheirSource: an error about a value names the environment
// variable or the configuration file line that set it, without echoing a
// secret: an exported DIFFERENTIAL_SASL_PASSWORD in a plaintext run.
func TestErrorsNameTheirSource(t *testing.T) {
	const pw = "Hunter2-secret"
	_, err := parseRunOptions([]string{"--brokers", "a:1"}, mapEnv(map[string]string{"DIFFERENTIAL_SASL_PASSWORD": pw}))
	require.ErrorContains(t, err, "need --sasl-mechanism")
	require.ErrorContains(t, err, "(--sasl-password is set by the environment variable DIFFERENTIAL_SASL_PASSWORD)")
	require.NotContains(t, err.Error(), pw)
	var ue *usageError
	require.ErrorAs(t, err, &ue, "still a usage error (exit 2)")

	path := writeConfig(t, "brokers: a:1\nbuffer: 10\noffset-distance: 20\n")
	_, err = parseRunOptions([]string{"--config", path}, &env{})
	require.ErrorContains(t, err, "--offset-distance must be >= 0 and smaller than --buffer (10), got 20")
	require.ErrorContains(t, err, "--offset-distance is set by the config file "+path+":3; --buffer is set by the config file "+path+":2")

	// A value given on the command line needs no note.
	_, err = parseRunOptions([]string{"--brokers", "a:1", "--sasl-password", pw}, &env{})
	require.NotContains(t, err.Error(), "is set by")

	// An error of the run itself (not of a setting) names the variables
	// too, and keeps its exit code.
	var out, errb bytes.Buffer
	e := mapEnv(map[string]string{"DIFFERENTIAL_BROKERS": "127.0.0.1:1"})
	e.stdout, e.stderr = &out, &errb
	require.Equal(t, exitFatal, cli(t.Context(), []string{"run"}, e), errb.String())
	require.Contains(t, errb.String(), "connect to --brokers")
	require.Contains(t, errb.String(), "(--brokers is set by the environment variable DIFFERENTIAL_BROKERS)")

	out.Reset()
	errb.Reset()
	e = mapEnv(map[string]string{"DIFFERENTIAL_SASL_PASSWORD": pw})
	e.stdout, e.stderr = &out, &errb
	require.Equal(t, exitUsage, cli(t.Context(), []string{"produce", "--brokers", "a:1"}, e))
	require.Contains(t, errb.String(), "--sasl-password is set by the environment variable DIFFERENTIAL_SASL_PASSWORD")
	require.NotContains(t, errb.String(), pw)
}
