package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release this source tree is, kept in step with the newest
// heading of CHANGELOG.md (TestVersionMatchesChangelog checks it). A binary
// installed as a module (`go install ...@v1.2.3`) reports its module version
// instead; a binary built in a checkout reports Version and the revision.
const Version = "0.1.0"

// versionCmd prints the version (see versionString), the module path, the
// Go version and the platform.
func versionCmd(_ context.Context, args []string, e *env) error {
	fs := newFlagSet("version", "Prints the version, the VCS revision it was built from, and the Go version.", e)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, versionString())
	return nil
}

func versionString() string {
	bi, _ := debug.ReadBuildInfo() // nil when the binary carries none
	return formatVersion(bi)
}

// formatVersion: the module version when the build information has a real
// one (a tagged or pseudo-version from `go install`), else Version; then
// the VCS revision when the build recorded one ("+dirty" for a modified
// tree), the module path, the Go version and the platform.
func formatVersion(bi *debug.BuildInfo) string {
	path, version, vcs := "github.com/differential-dev/differential", Version, ""
	if bi != nil {
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
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
