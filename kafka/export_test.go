package kafka

import "time"

// SetGrowMetadataWait shortens how long growTo waits for a partition the
// input does not list, for tests that ask for one on purpose; it returns
// the function that restores it.
func SetGrowMetadataWait(d time.Duration) (restore func()) {
	old := growMetadataWait
	growMetadataWait = d
	return func() { growMetadataWait = old }
}
