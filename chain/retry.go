package chain

import (
	"context"
	"fmt"
	"time"
)

// RetryPolicy is how a failing record is retried (DESIGN I8): the chain's
// stages use it (WithRetry), and so can anything that runs the same
// processors outside a chain (the micro-batch baseline).
type RetryPolicy struct {
	// MaxRetries is how many times a failed attempt is repeated.
	MaxRetries int
	// Backoff is the wait before the first retry; it doubles at every
	// retry, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// Do calls attempt until it returns nil, a Fatal or Permanent error, or
// MaxRetries retries have failed, waiting the backoff on ctx between two
// attempts (never a bare sleep). It returns nil after a successful attempt;
// otherwise the error to act on: a Fatal one stops the engine, any other is
// dead-lettered. When ctx ends before the next attempt, Do returns at once
// with an error that wraps both ctx.Err() and the last attempt's error;
// callers that must tell a stop from a failure check ctx.Err() first.
func (r RetryPolicy) Do(ctx context.Context, attempt func() error) error {
	return r.after(ctx, attempt(), attempt)
}

// after is Do once the first attempt returned err: the chain's stages make
// that attempt themselves, so a record that succeeds at once (nearly all)
// builds no closure.
func (r RetryPolicy) after(ctx context.Context, err error, attempt func() error) error {
	backoff := r.Backoff
	for n := 0; ; n++ {
		if err == nil || IsFatal(err) || IsPermanent(err) || n >= r.MaxRetries {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retry cut short after: %w)", ctx.Err(), err)
		}
		backoff = min(2*backoff, r.MaxBackoff)
		err = attempt()
	}
}
