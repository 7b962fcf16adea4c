package bench

import (
	"syscall"
	"time"
)

// processUsage is the process's CPU time and context switches so far.
func processUsage() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// kickArms is how many times the process's kicker set its timerfd.
func kickArms() int64 {
	k, err := processKicker()
	if err != nil {
		return 0
	}
	return k.arms.Load()
}
