//go:build !unix

package chain_test

import "time"

// processCPU is not measured here (cpu-ns/extra-stage reads 0).
func processCPU() time.Duration { return 0 }
