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

// startProfile starts the CPU profile named by profileEnv, if any, and
// returns the function that stops and writes it.
func startProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
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
