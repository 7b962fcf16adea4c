package attribution

import (
	"errors"
	"fmt"
	"time"
)

// maxWindow bounds every duration of a Config so that sums such as
// Lookback+Lateness and expiries computed from them cannot overflow.
const maxWindow = 100 * 365 * 24 * time.Hour

// Config holds the attribution rules' parameters (DESIGN §5).
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
}

// DefaultConfig returns the defaults of DESIGN §5: Lookback 7 days,
// Lateness 0, InstallRetention 30 days, DedupHorizon = Lookback,
// MaxClockSkew 1 hour, MaxRecordBytes 1 MiB.
func DefaultConfig() Config {
	return Config{
		Lookback:         7 * 24 * time.Hour,
		Lateness:         0,
		InstallRetention: 30 * 24 * time.Hour,
		DedupHorizon:     7 * 24 * time.Hour,
		MaxClockSkew:     time.Hour,
		MaxRecordBytes:   1 << 20,
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
	positive("InstallRetention", c.InstallRetention)
	positive("DedupHorizon", c.DedupHorizon)
	nonNegative("MaxClockSkew", c.MaxClockSkew)
	if c.MaxRecordBytes <= 0 {
		errs = append(errs, fmt.Errorf("attribution: MaxRecordBytes must be > 0 (got %d)", c.MaxRecordBytes))
	}
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
