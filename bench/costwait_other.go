//go:build !linux

package bench

import (
	"context"
	"errors"
	"time"
)

// kickSupported: the kick needs Linux's timerfd.
const kickSupported = false

func kickReady() error { return errors.New("CostWait \"kick\" needs Linux's timerfd") }

func kickArmError() error { return nil }

func kickStats() string { return "kick: not on this platform" }

func kickWait(ctx context.Context, d time.Duration) error { return timerWait(ctx, d) }
