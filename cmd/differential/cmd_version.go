package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionCmd prints the module version (from the build information: a tag
// for `go install ...@v1.2.3`, "(devel)" in a source tree), the VCS
// revision when the build recorded it, and the Go version.
func versionCmd(_ context.Context, args []string, e *env) error {
	fs := newFlagSet("version", "Prints the module version and the Go version.", e)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, versionString())
	return nil
}

func versionString() string {
	path, version, vcs := "github.com/differential-dev/differential", "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			vcs = " " + rev
			if settings["vcs.modified"] == "true" {
				vcs += "+dirty"
			}
		}
	}
	return fmt.Sprintf("differential %s%s (%s) %s %s/%s", version, vcs, path, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
