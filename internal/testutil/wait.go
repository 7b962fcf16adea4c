package testutil

import (
	"testing"
	"time"
)

// Recv returns the next value from ch, or fails t once timeout has passed
// without one: tests wait on channels, never by sleeping, and a wait that
// never ends names what it waited for.
func Recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
		panic("unreachable")
	}
}
