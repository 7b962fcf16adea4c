package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheckCostWait(t *testing.T) {
	require.NoError(t, checkCostWait(CostWaitTimer))
	require.ErrorContains(t, checkCostWait("sleep"), `unknown CostWait "sleep"`)
	if kickSupported {
		require.NoError(t, checkCostWait(CostWaitKick))
		require.Equal(t, CostWaitKick, DefaultCostWait)
	} else {
		require.ErrorContains(t, checkCostWait(CostWaitKick), "needs Linux's timerfd")
		require.Equal(t, CostWaitTimer, DefaultCostWait)
	}
	o := Options{CostWait: "spin"}.withDefaults()
	require.ErrorContains(t, o.validate(), `unknown CostWait "spin"`)
	require.Equal(t, DefaultCostWait, Options{}.withDefaults().CostWait)
}

// TestCostWaitNeverEarly: every mode's wait lasts at least what was asked
// (a simulated cost is never cheaper than its draw), and ends with its
// context.
func TestCostWaitNeverEarly(t *testing.T) {
	for _, mode := range CostWaits {
		t.Run(mode, func(t *testing.T) {
			wait := newCostWaiter(mode)
			var wg sync.WaitGroup
			var early atomic.Int64
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						d := time.Duration(50+(g*37+i*101)%1500) * time.Microsecond
						t0 := time.Now()
						if err := wait(context.Background(), d); err != nil {
							t.Error(err)
						}
						if time.Since(t0) < d {
							early.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			require.Zero(t, early.Load(), "waits shorter than asked")

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- wait(ctx, time.Hour) }()
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
		})
	}
}

// BenchmarkCostWait reports how much longer than asked the cost waits
// last (overshoot_%), per mode, with 1 and 64 concurrent waiters, with and
// without one goroutine keeping a P busy. The asked costs cycle over
// 0.3–1.7ms (mean 1ms, the bench's median cost). b.N waits in all.
//
//	go test ./bench -run '^$' -bench CostWait -benchtime 2000x -count 2
func BenchmarkCostWait(b *testing.B) {
	for _, mode := range CostWaits {
		for _, waiters := range []int{1, 64} {
			for _, busy := range []int{0, 1} {
				b.Run(fmt.Sprintf("%s/waiters=%d/busy=%d", mode, waiters, busy), func(b *testing.B) {
					benchCostWait(b, newCostWaiter(mode), waiters, busy)
				})
			}
		}
	}
}

func benchCostWait(b *testing.B, wait costWaiter, waiters, busy int) {
	stop := make(chan struct{})
	var spun sync.WaitGroup
	for range busy {
		spun.Add(1)
		go func() {
			defer spun.Done()
			x := 1
			for {
				select {
				case <-stop:
					runtime.KeepAlive(x)
					return
				default:
				}
				for i := range 10_000 {
					x = x*31 + i
				}
			}
		}()
	}
	var asked, got atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0, csw0 := processUsage()
	arms0 := kickArms()
	b.ResetTimer()
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				d := time.Duration(300+(i*137)%1400) * time.Microsecond
				t0 := time.Now()
				if err := wait(context.Background(), d); err != nil {
					b.Error(err)
					return
				}
				got.Add(int64(time.Since(t0)))
				asked.Add(int64(d))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu1, csw1 := processUsage()
	close(stop)
	spun.Wait()
	b.ReportMetric(100*(float64(got.Load())/float64(asked.Load())-1), "overshoot_%")
	// The waits' own cost: CPU (the busy goroutine's excluded: it spins
	// all along, so this is only meaningful without it) and the process's
	// context switches, per wait.
	if busy == 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e3, "cpu_µs/wait")
	}
	b.ReportMetric(float64(csw1-csw0)/float64(b.N), "csw/wait")
	if arms1 := kickArms(); arms1 > arms0 {
		b.ReportMetric(float64(arms1-arms0)/float64(b.N), "arms/wait")
	}
}
