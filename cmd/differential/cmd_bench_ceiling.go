package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/differential-dev/differential/bench"
)

// benchCeilingName is the hidden command bench runs each ceiling pass in
// (bench.Options.CeilingCommand): not listed by `differential help`.
const benchCeilingName = "bench-ceiling"

const benchCeilingSynopsis = `Internal to bench: runs one ceiling pass (the raw consumer or the one-stage
no-op chain) in this process, so that it has only its own heap. Reads a
bench.CeilingSpec (JSON) on stdin, writes the bench.DesignResult (JSON) on
stdout; progress and logs go to stderr. Exit 2 for a spec it cannot run, 1
when the pass fails (a lost or repeated offset, a stall past the spec's
timeout, an error).`

// benchCeilingCmd is the hidden `differential bench-ceiling`.
func benchCeilingCmd(ctx context.Context, args []string, e *env) error {
	logFormat, logLevel := "text", "error"
	fs := newFlagSet(benchCeilingName, benchCeilingSynopsis, e)
	registerLogFlags(fs, &logFormat, &logLevel, "engine log `level`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if e.stdin == nil {
		return usagef("no spec: stdin is not available")
	}
	err := bench.ServeCeiling(ctx, e.stdin, e.stdout, e.stderr, newLogger(e.stderr, logFormat, logLevel))
	if errors.Is(err, bench.ErrCeilingSpec) {
		return &usageError{err}
	}
	if err != nil {
		return fmt.Errorf("ceiling pass: %w", err)
	}
	return nil
}

// ceilingCommand is bench.Options.CeilingCommand for `bench`: this
// executable's hidden bench-ceiling with the same log flags; nil (the
// passes run in bench's process) when the executable is unknown — as in
// tests that run commands in-process.
func ceilingCommand(e *env, logFormat, logLevel string) []string {
	if e.executable == nil {
		return nil
	}
	exe, err := e.executable()
	if err != nil {
		fmt.Fprintf(e.stderr, "bench: the ceilings run in this process: cannot find this executable for their child processes: %v\n", err)
		return nil
	}
	return []string{exe, benchCeilingName, "--log-format", logFormat, "--log-level", logLevel}
}
