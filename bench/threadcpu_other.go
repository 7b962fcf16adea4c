//go:build !linux

package bench

import "time"

var threadClockStart = time.Now()

// threadCPU falls back to the monotonic wall clock where no per-thread CPU
// clock is available (the heavy-key figures are then wall times).
func threadCPU() time.Duration { return time.Since(threadClockStart) }
