package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// Exit codes.
const (
	exitOK    = 0
	exitFatal = 1
	exitUsage = 2
)

// env is what a command may touch outside its arguments: its output
// streams, and seams that only tests set.
type env struct {
	stdout, stderr io.Writer
	// lookupEnv reads the process environment (os.LookupEnv in the
	// binary); nil: no environment, as in-process tests run.
	lookupEnv func(string) (string, bool)
	// environ lists the process environment (os.Environ in the binary),
	// for the check of unknown DIFFERENTIAL_* variables; nil: no check.
	environ func() []string
	hooks   hooks
}

// hooks are test seams; the binary leaves them all zero.
type hooks struct {
	// chainOptions are appended to the chain's options (e.g. an observer).
	chainOptions []chain.Option
	// wrapStages may replace the attribution stages (e.g. a blocking processor).
	wrapStages func([]chain.Stage) []chain.Stage
	// metricsListening receives the metrics server's bound address.
	metricsListening func(addr string)
	// now is the health check's clock.
	now func() time.Time
	// tamperOutputs may change what the demo read back from its output
	// topic before verifying it (tests break the verification on purpose).
	tamperOutputs func([]reference.Written) []reference.Written
	// wrapProducer may replace run's output producer (the chaosbreak build
	// breaks the engine on purpose for the fault-injection suite); in
	// exactly-once mode it wraps the transactional producer's sends.
	wrapProducer func(chain.Producer) chain.Producer
	// wrapChangelog may replace the chain's changelog (tests hold a
	// restore on purpose).
	wrapChangelog func(chain.Changelog) chain.Changelog
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, e *env) error
}

var commands = []command{
	{"demo", "run the attribution chain on a generated workload on an embedded broker, then verify it", demoCmd},
	{"run", "run the attribution chain against Kafka brokers", runCmd},
	{"produce", "write a generated attribution workload to a topic", produceCmd},
	{"bench", "compare the chain engine with the micro-batch baseline", benchCmd},
	{"heavykey", "measure a heavy key's per-record cost against the other keys'", heavyKeyCmd},
	{"bench-table", "print a bench JSON report's throughput table as Markdown", benchTableCmd},
	{"version", "print the version", versionCmd},
}

// cli runs the command named by args[0] and returns the process exit code.
func cli(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			usage(e.stdout)
			return exitOK
		}
		// differential help <command>: the command's own help.
		name, args = args[1], []string{args[1], "--help"}
	}
	for _, c := range commands {
		if c.name == name {
			return exitCode(e, name, c.run(ctx, args[1:], e))
		}
	}
	fmt.Fprintf(e.stderr, "differential: unknown command %q\n\n", name)
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: differential <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'differential help <command>' (or 'differential <command> --help') for a command's flags.\n")
	_, _ = io.WriteString(w, b.String())
}

// usageError is a problem with flags or the configuration file (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitCode prints a failed command's error and maps it to an exit code.
func exitCode(e *env, name string, err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "differential %s: %v\nRun 'differential %s --help' for usage.\n", name, err, name)
		return exitUsage
	default:
		fmt.Fprintf(e.stderr, "differential %s: %v\n", name, err)
		return exitFatal
	}
}
