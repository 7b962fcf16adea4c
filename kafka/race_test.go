//go:build race

package kafka_test

// raceEnabled: the test binary runs under the race detector.
const raceEnabled = true
