package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// profileEnv names a file to write a CPU profile of the whole process to
// (pprof format), for finding where a run spends its time:
//
//	DIFFERENTIAL_CPUPROFILE=cpu.prof differential run ...
//	go tool pprof -top differential cpu.prof
const profileEnv = "DIFFERENTIAL_CPUPROFILE"

// startProfile starts the CPU profile named by profileEnv (+ suffix), if
// any, and returns the function that stops and writes it.
func startProfile(stderr io.Writer, suffix string) (stop func()) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	path += suffix
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", profileEnv, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", profileEnv, err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", profileEnv, err)
		}
	}
}

// profileSuffix is "" but for bench's ceiling children, which inherit
// bench's environment: each writes its own profile, <file>.ceiling-<pid>
// (the pass alone, without the harness or the embedded broker), instead of
// overwriting bench's.
func profileSuffix(args []string) string {
	if len(args) > 0 && args[0] == benchCeilingName {
		return fmt.Sprintf(".ceiling-%d", os.Getpid())
	}
	return ""
}
