//go:build race

package attribution_test

// raceEnabled shrinks the differential workloads under the race detector
// (the processors have no concurrency of their own; the full workloads
// run without -race).
const raceEnabled = true
