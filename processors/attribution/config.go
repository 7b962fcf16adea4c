package attribution

import (
	"errors"
	"fmt"
	"time"

	"github.com/differential-dev/differential/processors/window"
)

// maxWindow bounds every duration of a Config so that sums such as
// Lookback+Lateness and expiries computed from them cannot overflow.
const maxWindow = 100 * 365 * 24 * time.Hour

// Config holds the attribution rules' parameters (DESIGN.md "Attribution rules").
type Config struct {
	// Lookback is how far before an install a click may be (t − click.time ≤ Lookback).
	Lookback time.Duration
	// Lateness is how late (in stream time) a click may arrive and still be
	// matched; it is also the lateness the engine's follower gate must use.
	Lateness time.Duration
	// InstallRetention is how long after an install purchases are attributed to it.
	InstallRetention time.Duration
	// DedupHorizon is how long (in stream time) an event id is remembered.
	DedupHorizon time.Duration
	// MaxClockSkew is how far an event time may be after the Kafka record's
	// own timestamp.
	MaxClockSkew time.Duration
	// MaxRecordBytes is the largest record value accepted.
	MaxRecordBytes int
	// Velocity configures the optional velocity stage (click-spam alerts);
	// it is off when Velocity.Window is 0 (the default).
	Velocity VelocityConfig
	// IdleTimeout is the engine's idle timeout (chain.WithIdleTimeout), for
	// the reference model only: the processors read the horizon the
	// engine derived from it (chain.Context.Horizon), and the model
	// derives the same one from the records' Kafka timestamps. 0 (the
	// default): the model assumes no gap in the log.
	IdleTimeout time.Duration
}

// VelocityConfig configures the velocity stage: per user, the count of
// non-duplicate valid clicks over a trailing event-time Window (a
// processors/window counter), and an alert when it exceeds Threshold (see
// VelocityProcessor for the rule).
type VelocityConfig struct {
	// Window is W, the counting window; 0 disables the stage. At most
	// maxVelocitySpan with Lateness.
	Window time.Duration
	// Bucket is the counter's time granularity (window.Config.Bucket):
	// Window must be a multiple of it. Required when Window > 0
	// (DefaultVelocity uses window.DefaultBucket).
	Bucket time.Duration
	// Lateness: a click more than Lateness behind the stream time is not
	// counted (window.Config.Lateness).
	Lateness time.Duration
	// Threshold: an alert when a user's count exceeds it (≥ 1).
	Threshold int64
}

// maxVelocitySpan bounds Velocity.Window+Lateness so that the counter can
// store every time the Decoder accepts (before MaxTime).
const maxVelocitySpan = 90 * 24 * time.Hour

// DefaultVelocity returns the velocity settings for window w: bucket
// window.DefaultBucket(w) (1m for 1h), lateness w, threshold 20.
func DefaultVelocity(w time.Duration) VelocityConfig {
	return VelocityConfig{Window: w, Bucket: window.DefaultBucket(w), Lateness: w, Threshold: 20}
}

// Enabled reports whether the velocity stage runs.
func (v VelocityConfig) Enabled() bool { return v.Window != 0 }

func (v VelocityConfig) validate() []error {
	if !v.Enabled() {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("attribution: Velocity."+format, args...))
	}
	switch {
	case v.Window < 0:
		bad("Window must be >= 0 (got %v)", v.Window)
	case v.Bucket <= 0:
		bad("Bucket must be > 0 (got %v)", v.Bucket)
	case v.Window%v.Bucket != 0:
		bad("Window %v must be a multiple of Bucket %v", v.Window, v.Bucket)
	case v.Lateness < 0:
		bad("Lateness must be >= 0 (got %v)", v.Lateness)
	case v.Window+v.Lateness > maxVelocitySpan:
		bad("Window+Lateness must be at most %v (got %v)", maxVelocitySpan, v.Window+v.Lateness)
	case (v.Window+v.Lateness)/v.Bucket > window.MaxBuckets:
		bad("(Window+Lateness)/Bucket must be at most %d (got %d): use a coarser Bucket", window.MaxBuckets, (v.Window+v.Lateness)/v.Bucket)
	}
	if v.Threshold < 1 {
		bad("Threshold must be >= 1 (got %d)", v.Threshold)
	}
	return errs
}

// DefaultMaxRecordBytes is MaxRecordBytes' default, 64 KiB. A valid event
// is a few hundred bytes, so anything near the limit is malformed; and the
// limit must stay well below what a stock broker accepts (max.message.bytes
// 1,048,588 for the whole record batch): at the former 1 MiB no record a
// default topic holds could exceed it, so the oversized check, and the
// "oversized" records of the generated workload, never reached the dead
// letters. It also bounds what one buffered record can hold in memory.
const DefaultMaxRecordBytes = 64 << 10

// DefaultConfig returns the defaults of DESIGN.md "Attribution rules": Lookback 7 days,
// Lateness 0, InstallRetention 30 days, DedupHorizon = Lookback,
// MaxClockSkew 1 hour, MaxRecordBytes DefaultMaxRecordBytes (64 KiB).
func DefaultConfig() Config {
	return Config{
		Lookback:         7 * 24 * time.Hour,
		Lateness:         0,
		InstallRetention: 30 * 24 * time.Hour,
		DedupHorizon:     7 * 24 * time.Hour,
		MaxClockSkew:     time.Hour,
		MaxRecordBytes:   DefaultMaxRecordBytes,
	}
}

// Validate reports every invalid field of c.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("attribution: %s must be > 0 (got %v)", name, d))
		} else if d > maxWindow {
			errs = append(errs, fmt.Errorf("attribution: %s must be at most %v (got %v)", name, maxWindow, d))
		}
	}
	nonNegative := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("attribution: %s must be >= 0 (got %v)", name, d))
		} else if d > maxWindow {
			errs = append(errs, fmt.Errorf("attribution: %s must be at most %v (got %v)", name, maxWindow, d))
		}
	}
	positive("Lookback", c.Lookback)
	nonNegative("Lateness", c.Lateness)
	nonNegative("IdleTimeout", c.IdleTimeout)
	positive("InstallRetention", c.InstallRetention)
	positive("DedupHorizon", c.DedupHorizon)
	nonNegative("MaxClockSkew", c.MaxClockSkew)
	if c.MaxRecordBytes <= 0 {
		errs = append(errs, fmt.Errorf("attribution: MaxRecordBytes must be > 0 (got %d)", c.MaxRecordBytes))
	}
	errs = append(errs, c.Velocity.validate()...)
	return errors.Join(errs...)
}

// mustValidate panics with Validate's message; Chain and Decoder take a
// Config that the caller validated when it was built (like regexp.MustCompile).
func (c Config) mustValidate(caller string) {
	if err := c.Validate(); err != nil {
		panic(caller + ": invalid config: " + err.Error())
	}
}

// clickWindow is how long (in stream time) a click stays usable: Lookback + Lateness.
func (c Config) clickWindow() time.Duration { return c.Lookback + c.Lateness }

// clickBucket is the event-time width of one click bucket: Lookback/8 (at
// least a second), so an install reads at most 9 buckets.
func (c Config) clickBucket() time.Duration { return max(c.Lookback/8, time.Second) }

// bucketOf is the bucket of event time t (t is after 1970: the decoder
// rejects earlier times).
func (c Config) bucketOf(t time.Time) int64 { return t.UnixNano() / int64(c.clickBucket()) }
