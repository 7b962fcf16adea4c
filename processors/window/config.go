package window

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxBuckets bounds (Window+Lateness)/Bucket, the number of buckets one
// key's state can hold (plus one, see the package doc).
const MaxBuckets = 1 << 16

// maxSpan bounds Window+Lateness so that expiries cannot overflow.
const maxSpan = 100 * 365 * 24 * time.Hour

// Config describes a Counter.
type Config struct {
	// Name identifies the counter: its state keys are "w/<Name>/<key>" and
	// its metrics "differential.window.<Name>.*". Non-empty, without '/'.
	// Two counters in one chain must have different names.
	Name string
	// Window is W: a record at time t counts the records of its key whose
	// time falls in (t−W, t], at bucket granularity (see the package doc).
	// Required, > 0.
	Window time.Duration
	// Bucket is B, the time granularity: times are truncated to a multiple
	// of B before they are compared. Window must be a multiple of Bucket.
	// One key's state holds at most ⌊(Window+Lateness)/Bucket⌋ + 1 buckets.
	// Default (0): DefaultBucket(Window).
	Bucket time.Duration
	// Lateness is L: a record whose time is more than L before the stream
	// time (StreamTime − t > L) is late: it is not counted and Add returns
	// 0. Default 0 (a record older than the stream time is late).
	Lateness time.Duration
}

// bucketUnits are the widths DefaultBucket picks from, coarsest first.
var bucketUnits = []time.Duration{
	24 * time.Hour, 12 * time.Hour, 6 * time.Hour, time.Hour,
	30 * time.Minute, 15 * time.Minute, 10 * time.Minute, 5 * time.Minute, time.Minute,
	30 * time.Second, 15 * time.Second, 10 * time.Second, 5 * time.Second, time.Second,
	500 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond, 10 * time.Millisecond,
	5 * time.Millisecond, time.Millisecond, 100 * time.Microsecond, 10 * time.Microsecond,
	time.Microsecond, 100, 10, 1,
}

// DefaultBucket returns the coarsest of 24h, 12h, 6h, 1h, 30m, 15m, 10m, 5m,
// 1m, 30s, 15s, 10s, 5s, 1s, 500ms, … 1ns that divides w into at least 60
// buckets (1m for 1h, 1h for 7 days, 10s for 10m); 1ns when none does.
func DefaultBucket(w time.Duration) time.Duration {
	for _, u := range bucketUnits {
		if w%u == 0 && w/u >= 60 {
			return u
		}
	}
	return 1
}

// withDefaults returns c with Bucket filled in.
func (c Config) withDefaults() Config {
	if c.Bucket == 0 && c.Window > 0 {
		c.Bucket = DefaultBucket(c.Window)
	}
	return c
}

// Validate reports every invalid field of c (after defaults: a zero Bucket
// is valid).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("window: "+format, args...))
	}
	if c.Name == "" || strings.Contains(c.Name, "/") {
		bad("Name must be non-empty and without '/' (got %q)", c.Name)
	}
	switch {
	case c.Window <= 0:
		bad("Window must be > 0 (got %v)", c.Window)
	case c.Bucket <= 0:
		bad("Bucket must be > 0 (got %v)", c.Bucket)
	case c.Window%c.Bucket != 0:
		bad("Window %v must be a multiple of Bucket %v", c.Window, c.Bucket)
	}
	if c.Lateness < 0 {
		bad("Lateness must be >= 0 (got %v)", c.Lateness)
	}
	if c.Window > 0 && c.Lateness >= 0 {
		if c.Window+c.Lateness > maxSpan {
			bad("Window+Lateness must be at most %v (got %v)", maxSpan, c.Window+c.Lateness)
		} else if c.Bucket > 0 && (c.Window+c.Lateness)/c.Bucket > MaxBuckets {
			bad("(Window+Lateness)/Bucket must be at most %d (got %d): use a coarser Bucket",
				MaxBuckets, (c.Window+c.Lateness)/c.Bucket)
		}
	}
	return errors.Join(errs...)
}

// FormatDuration formats d like time.Duration.String without zero trailing
// units: "1h" for 1h0m0s, "1h30m", "10m", "90ms".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
