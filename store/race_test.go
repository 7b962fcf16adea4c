//go:build race

package store

// raceEnabled runs the store's single-goroutine property tests on fewer
// seeds under the race detector: their histories drive the store from one
// goroutine, so more seeds add no interleavings for it to check (the full
// seed counts run without -race).
const raceEnabled = true
