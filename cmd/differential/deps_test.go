package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// testOnly are the module's packages that only tests use: the fault suite,
// the end-to-end tests, the test brokers, the OTLP receiver, the
// certificates, the shared test helpers and the chain tester. The embedded
// broker that demo runs (internal/embedded, kfake) is a feature and is not
// listed.
var testOnly = []string{
	"chain/chaintest",
	"internal/chaos",
	"internal/e2e",
	"internal/otlptest",
	"internal/testbroker",
	"internal/testcerts",
	"internal/testutil",
}

// TestBinaryLinksNoTestCode: the binary's dependencies (go list -deps of
// this package, test files excluded) hold none of the test-only packages,
// and no package that imports "testing" — a package that does is test
// support, whichever module it comes from.
func TestBinaryLinksNoTestCode(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	module := modulePath(t, gobin)
	var pkgs int
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkgs++
		pkg, imports := fields[0], fields[1:]
		if pkg == "testing" {
			t.Errorf("the binary links package testing")
		}
		for _, p := range testOnly {
			if pkg == module+"/"+p {
				t.Errorf("the binary links the test-only package %s", pkg)
			}
		}
		for _, imp := range imports {
			if imp == "testing" {
				t.Errorf("the binary links %s, which imports testing", pkg)
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list -deps listed %d packages; expected the binary's whole graph:\n%s", pkgs, out)
	}
}

// engine are the packages an embedding program imports; harness are the
// benchmark's and the workload generator's, which the binary links for
// `differential bench` but the engine must not.
var (
	engine  = []string{"./buffer/...", "./chain/...", "./commit/...", "./kafka/...", "./store/...", "./processors/..."}
	harness = []string{"bench", "bench/microbatch", "internal/workload", "internal/cluster", "internal/embedded"}
)

// TestEngineImportsNoHarness: no engine package (test files excluded)
// depends on the benchmark, the workload generator or the embedded broker.
func TestEngineImportsNoHarness(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the engine's packages: %v", err)
	}
	module := modulePath(t, gobin)
	cmd := exec.Command(gobin, append([]string{"list", "-deps"}, engine...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	var pkgs int
	for line := range strings.Lines(string(out)) {
		pkg := strings.TrimSpace(line)
		pkgs++
		for _, h := range harness {
			if pkg == module+"/"+h {
				t.Errorf("an engine package depends on %s", pkg)
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list -deps listed %d packages; expected the engine's whole graph:\n%s", pkgs, out)
	}
}

func modulePath(t *testing.T, gobin string) string {
	t.Helper()
	out, err := exec.Command(gobin, "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v\n%s", err, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}

func stderrOf(err error) []byte {
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.Stderr
	}
	return nil
}
