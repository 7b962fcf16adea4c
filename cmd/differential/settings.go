package main

import (
	"flag"
	"fmt"
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

// secretFlags are never echoed: not in errors, not in --help.
var secretFlags = map[string]bool{"sasl-password": true, "http-token": true}

// settle completes a parsed flag set in the order of precedence flag > env >
// file > default: every flag the command line did not set takes its
// environment variable's value (an empty variable counts as unset), then
// every flag still unset takes the configuration file's value. *config is
// the --config flag's value, which the environment may set too (it is read
// after the environment). otherKeys are keys of the other commands'
// settings that this command ignores in the file, so run and produce can
// share one file.
func settle(fs *flag.FlagSet, e *env, config *string, otherKeys map[string]bool) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if e.lookupEnv != nil {
		var err error
		fs.VisitAll(func(f *flag.Flag) {
			if err != nil || set[f.Name] {
				return
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
			set[f.Name] = true
		})
		if err != nil {
			return err
		}
	}
	if *config == "" {
		return nil
	}
	return applyConfigFile(fs, *config, set, otherKeys)
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
the environment, which wins over the file.`, envPrefix, example)
}
