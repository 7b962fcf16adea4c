package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feed builds samples every 100 ms for 20 s of a 2-partition input that
// gets 5 records per partition every 500 ms; commitsAt says what the group
// has committed at t (given the end offsets at t).
func feed(t0 time.Time, commitsAt func(at time.Duration, ends []int64) []int64) *lagSampler {
	l := &lagSampler{partitions: 2, changed: make(chan struct{})}
	for at := time.Duration(0); at <= 20*time.Second; at += 100 * time.Millisecond {
		n := int64(at/(500*time.Millisecond)+1) * 5
		ends := []int64{n, n}
		commits := commitsAt(at, ends)
		l.add(lagSample{at: t0.Add(at), ends: ends, commits: commits, end: 2 * n, committed: commits[0] + commits[1]})
	}
	return l
}

// endsAt are the end offsets d ago.
func endsAt(at, d time.Duration) int64 {
	if at < d {
		return 0
	}
	return int64((at-d)/(500*time.Millisecond)+1) * 5
}

// TestRecoveredNeedsEveryPartitionCaughtUpAndStaying: the recovery of a
// fault at 5 s is when every partition has committed records written after
// it and stays within CatchUpWindow for CatchUpHold; a short good stretch
// and one partition still stuck do not count.
func TestRecoveredNeedsEveryPartitionCaughtUpAndStaying(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fault := 5 * time.Second
	healthy := func(at time.Duration) int64 { return endsAt(at, 600*time.Millisecond) }
	// Stuck from the fault until 9 s, with a 1 s good stretch at 7 s.
	l := feed(t0, func(at time.Duration, _ []int64) []int64 {
		switch {
		case at < fault, at >= 9*time.Second, at >= 7*time.Second && at < 8*time.Second:
			return []int64{healthy(at), healthy(at)}
		}
		return []int64{healthy(fault), healthy(fault)}
	})
	at, ok := l.recovered(t0.Add(fault))
	require.True(t, ok)
	assert.Equal(t, 9*time.Second, at.Sub(t0), "the stretch from 9 s lasts; the one at 7 s does not")

	// Partition 1 never moves after the fault.
	l = feed(t0, func(at time.Duration, _ []int64) []int64 {
		return []int64{healthy(at), healthy(min(at, fault))}
	})
	_, ok = l.recovered(t0.Add(fault))
	assert.False(t, ok, "one partition stuck is no recovery")

	// An undisturbed engine recovers as soon as the window allows.
	l = feed(t0, func(at time.Duration, _ []int64) []int64 { return []int64{healthy(at), healthy(at)} })
	at, ok = l.recovered(t0.Add(fault))
	require.True(t, ok)
	assert.Equal(t, fault+CatchUpWindow, at.Sub(t0))
}

// A scenario that injects a stall passes only when /healthz answered
// "503 stalled" after its first fault: a stall before it, or none, fails.
func TestStallReported(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ev := func(sec float64, status string) healthEvent {
		return healthEvent{at: t0.Add(time.Duration(sec * float64(time.Second))), status: status}
	}
	require.NoError(t, stallReported([]healthEvent{ev(-5, "200 ok"), ev(6, "503 stalled"), ev(14, "200 ok")}, t0))
	err := stallReported([]healthEvent{ev(-5, "200 ok")}, t0)
	require.ErrorContains(t, err, "never reported the injected stall")
	err = stallReported([]healthEvent{ev(-5, "503 stalled"), ev(-1, "200 ok"), ev(3, "unreachable"), ev(4, "200 ok")}, t0)
	require.ErrorContains(t, err, "it answered [unreachable 200 ok]")
	require.Error(t, stallReported(nil, time.Time{}))
}
