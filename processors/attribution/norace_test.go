//go:build !race

package attribution_test

const raceEnabled = false
