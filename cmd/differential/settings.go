package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// envPrefix starts the environment variable of every flag of run and
// produce: DIFFERENTIAL_ and the flag's name in upper case with '-' as '_'
// (--state-dir is DIFFERENTIAL_STATE_DIR, --sasl-password
// DIFFERENTIAL_SASL_PASSWORD).
const envPrefix = "DIFFERENTIAL_"

// envName is the environment variable of the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// secretFlags are never echoed: not in errors, not in --help, not in
// --print-config.
var secretFlags = map[string]bool{"sasl-password": true, "http-token": true}

// notSettings are the DIFFERENTIAL_* variables that are no flag's: the
// test harness's, scripts/kafka.sh's, CI's and the soak, chaos and
// benchmark tests' (they run the binary with their environment), and the
// binary's own switches that are no settings. The unknown-variable check
// lets them pass; TestNotSettingsCoverTheRepository keeps the list in step
// with the repository.
var notSettings = map[string]bool{
	// internal/testbroker, cmd/differential's secured-broker and browser tests
	"DIFFERENTIAL_TEST_BROKERS": true, "DIFFERENTIAL_TEST_SECURE_PORT": true, "DIFFERENTIAL_TEST_BROWSER": true,
	// scripts/browser.sh
	"DIFFERENTIAL_BROWSER": true,
	// scripts/kafka.sh, .ci/run, internal/chaos
	"DIFFERENTIAL_KAFKA_CACHE": true, "DIFFERENTIAL_KAFKA_DATA": true, "DIFFERENTIAL_KAFKA_PORT": true,
	"DIFFERENTIAL_KAFKA_HEAP": true, "DIFFERENTIAL_KAFKA_JVM_OPTS": true, "DIFFERENTIAL_KAFKA_START_TIMEOUT": true,
	// internal/chaos, and the chaosbreak build's broken producer
	"DIFFERENTIAL_CHAOS": true, "DIFFERENTIAL_CHAOS_REPORT": true, "DIFFERENTIAL_CHAOS_BREAK": true,
	"DIFFERENTIAL_CHAOS_LOGS": true, "DIFFERENTIAL_BREAK": true, "DIFFERENTIAL_BREAK_AFTER": true,
	// internal/e2e
	"DIFFERENTIAL_SOAK": true, "DIFFERENTIAL_SOAK_FLAGS": true, "DIFFERENTIAL_SOAK_NEW_FLAGS": true,
	"DIFFERENTIAL_OLD_BIN": true, "DIFFERENTIAL_DOWNGRADE_VIA_COMPAT": true, "DIFFERENTIAL_DOWNGRADE_SAME_DIR": true,
	"DIFFERENTIAL_DOWNGRADE_VIA_EOS": true, "DIFFERENTIAL_E2E_DUMP": true, "DIFFERENTIAL_FLEET_ALL": true,
	"DIFFERENTIAL_FLEET_BENCH": true, "DIFFERENTIAL_FLEET_BENCH_FLAGS": true, "DIFFERENTIAL_STANDBY_BENCH_RECORDS": true,
	"DIFFERENTIAL_SCALE_BENCH": true, "DIFFERENTIAL_SCALE_PARTITIONS": true, "DIFFERENTIAL_SCALE_RECORDS": true, "DIFFERENTIAL_SCALE_FLAGS": true, "DIFFERENTIAL_SCALE_RATE": true,
	// benchmarks and measurements in tests
	"DIFFERENTIAL_BENCH_TEST_CHILD": true, "DIFFERENTIAL_RESTORE_ENTRIES": true, "DIFFERENTIAL_MEASURE_REFRESH": true,
	// the binary's CPU profile (profile.go)
	profileEnv: true,
}

// Where a setting's value came from (--print-config, and errors about a
// value).
const (
	fromDefault = "default"
	fromFlag    = "flag"
	fromEnv     = "environment"
	fromFile    = "file"
)

// source is where one flag's value came from: kind (fromFlag, ...) and
// where (the variable's name, the file and line).
type source struct{ kind, where string }

func (s source) String() string {
	switch s.kind {
	case fromEnv:
		return "environment variable " + s.where
	case fromFile:
		return "config file " + s.where
	}
	return s.kind
}

// sources maps every flag of a set to where its value came from.
type sources map[string]source

// settle completes a parsed flag set in the order of precedence flag > env >
// file > default: every flag the command line did not set takes its
// environment variable's value (an empty variable counts as unset), then
// every flag still unset takes the configuration file's value. *config is
// the --config flag's value, which the environment may set too (it is read
// after the environment). otherKeys are keys of the other commands'
// settings that this command ignores in the file and the environment, so
// run and produce can share both. A DIFFERENTIAL_* variable that is no
// setting of either command nor in notSettings is an error, as an unknown
// key of the file is. It returns where each flag's value came from.
func settle(fs *flag.FlagSet, e *env, config *string, otherKeys map[string]bool) (sources, error) {
	src := sources{}
	fs.VisitAll(func(f *flag.Flag) { src[f.Name] = source{kind: fromDefault} })
	fs.Visit(func(f *flag.Flag) { src[f.Name] = source{kind: fromFlag, where: "--" + f.Name} })
	if err := checkEnvNames(fs, e, otherKeys); err != nil {
		return src, err
	}
	if e.lookupEnv != nil {
		var err error
		fs.VisitAll(func(f *flag.Flag) {
			if err != nil || src[f.Name].kind != fromDefault || f.Name == "print-config" {
				return // --print-config is a question asked on the command line, not a setting
			}
			name := envName(f.Name)
			v, ok := e.lookupEnv(name)
			if !ok || v == "" {
				return
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				if secretFlags[f.Name] {
					err = usagef("environment variable %s (--%s): invalid value: %v", name, f.Name, serr)
				} else {
					err = usagef("environment variable %s (--%s): invalid value %q: %v", name, f.Name, v, serr)
				}
				return
			}
			src[f.Name] = source{kind: fromEnv, where: name}
		})
		if err != nil {
			return src, err
		}
	}
	if *config == "" {
		return src, nil
	}
	return src, applyConfigFile(fs, *config, src, otherKeys)
}

// checkEnvNames refuses a DIFFERENTIAL_* variable of the environment that
// names no flag of fs or of the other commands (otherKeys) and is not in
// notSettings, naming the closest flag's variable. An empty variable is
// unset, as settle reads it.
func checkEnvNames(fs *flag.FlagSet, e *env, otherKeys map[string]bool) error {
	if e.environ == nil {
		return nil
	}
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = f.Name != "print-config" })
	for k := range otherKeys {
		known[envName(k)] = true
	}
	var unknown []string
	for _, kv := range e.environ() {
		name, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || notSettings[name] || v == "" {
			continue
		}
		unknown = append(unknown, name)
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := unknown[0]
	key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))
	hint := " (the variables are " + envPrefix + "<FLAG>, the flag's name in upper case with '-' as '_')"
	if best := closest(fs, key, otherKeys); best != "" {
		hint = fmt.Sprintf(" (did you mean %s, --%s?)", envName(best), best)
	}
	more := ""
	if len(unknown) > 1 {
		more = fmt.Sprintf("; also unknown: %s", strings.Join(unknown[1:], ", "))
	}
	return usagef("environment variable %s is no setting%s%s", name, hint, more)
}

// flagRef finds the flags an error message names (--name).
var flagRef = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// explain adds to an error where the value of every flag it names came
// from, when that was the environment or the file, so that an operator who
// did not type the flag finds what set it: a usage error stays one (exit
// 2), any other error (a failed connection to --brokers) keeps its kind.
func (src sources) explain(err error) error {
	if err == nil {
		return nil
	}
	var notes []string
	seen := map[string]bool{}
	for _, m := range flagRef.FindAllStringSubmatch(err.Error(), -1) {
		name := m[1]
		s, ok := src[name]
		if !ok || seen[name] || (s.kind != fromEnv && s.kind != fromFile) {
			continue
		}
		seen[name] = true
		notes = append(notes, fmt.Sprintf("--%s is set by the %s", name, s))
	}
	if len(notes) == 0 {
		return err
	}
	wrapped := fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
	var ue *usageError
	if errors.As(err, &ue) {
		return &usageError{wrapped} // still exit 2
	}
	return wrapped
}

// printConfig writes the effective configuration of fs: one line per flag
// in name order, as the YAML file --config reads (the value quoted), with
// where the value came from as a comment; a secret's value is redacted.
// A default is a comment line too (as a key of the file it would count as
// set, and some flags' defaults mean "not set": --velocity-threshold
// without --velocity-window), and so is --config (the file cannot name
// itself): the output, as a file, gives the same configuration.
func printConfig(w io.Writer, fs *flag.FlagSet, src sources) {
	fmt.Fprintf(w, "# %s: the effective configuration (a flag wins over the environment, the environment over the file, the file over the default)\n", fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		switch {
		case f.Name == "print-config":
			return
		case f.Name == "config":
			if v != "" {
				fmt.Fprintf(w, "# config: %s (%s)\n", strconv.Quote(v), src[f.Name])
			}
			return
		case secretFlags[f.Name] && v != "":
			fmt.Fprintf(w, "%s: %q # %s, redacted\n", f.Name, "<redacted>", src[f.Name])
			return
		}
		comment := ""
		if src[f.Name].kind == fromDefault {
			comment = "# "
		}
		fmt.Fprintf(w, "%s%s: %s # %s\n", comment, f.Name, strconv.Quote(v), src[f.Name])
	})
}

// flagNames returns the names of the flags register defines.
func flagNames(register func(*flag.FlagSet)) map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	register(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// envHelp is the paragraph of run's and produce's help about the environment.
func envHelp(example string) string {
	return fmt.Sprintf(`Every flag can also be set by the environment variable %s<FLAG>
(upper case, '-' as '_': %s) and by a key of the YAML file
given with --config (the flag's name). A flag on the command line wins over
the environment, which wins over the file. A %s* variable that is no
setting is refused, as an unknown key of the file is.`, envPrefix, example, envPrefix)
}
