package main

import (
	"flag"
	"strconv"
	"time"

	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/window"
)

// velocityOptions are the velocity stage's flags, shared by `run` and
// `demo` (and the configuration file's keys of the same names).
type velocityOptions struct {
	window    time.Duration
	threshold int64
	bucket    time.Duration
	lateness  time.Duration
	alerts    string
	// set: which of the flags the command line or the file set.
	set map[string]bool
}

var velocityFlags = []string{"velocity-threshold", "velocity-bucket", "velocity-lateness", "alerts"}

func (v *velocityOptions) register(fs *flag.FlagSet) {
	v.threshold = attribution.DefaultVelocity(time.Hour).Threshold
	fs.Var(durationValue{&v.window}, "velocity-window",
		"count each user's clicks over this trailing event-time `duration` and alert on click spam (the velocity stage); 0: off")
	fs.Int64Var(&v.threshold, "velocity-threshold", v.threshold, "alert when a user's click count in --velocity-window exceeds this `count`")
	fs.Var(durationValue{&v.bucket}, "velocity-bucket",
		"time granularity of the click counts; --velocity-window must be a multiple (default: about the window/60, e.g. 1m for 1h)")
	fs.Var(durationValue{&v.lateness}, "velocity-lateness",
		"clicks more than this `duration` behind the stream time are not counted (default: the --velocity-window)")
	fs.StringVar(&v.alerts, "alerts", v.alerts, "`topic` of the velocity alerts (must exist; default: the --output topic)")
}

// noteSet records which velocity flags were given (after the file).
func (v *velocityOptions) noteSet(fs *flag.FlagSet) {
	v.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { v.set[f.Name] = true })
}

func (v *velocityOptions) validate() error {
	if v.window == 0 {
		for _, f := range velocityFlags {
			if v.set[f] {
				return usagef("--%s needs --velocity-window (the velocity stage is off without it)", f)
			}
		}
		return nil
	}
	switch {
	case v.window < 0:
		return usagef("--velocity-window must be >= 0, got %s", v.window)
	case v.threshold < 1:
		return usagef("--velocity-threshold must be >= 1, got %d", v.threshold)
	case v.set["velocity-bucket"] && (v.bucket <= 0 || v.window%v.bucket != 0):
		return usagef("--velocity-bucket must be > 0 and divide --velocity-window %s, got %s", window.FormatDuration(v.window), window.FormatDuration(v.bucket))
	case v.set["velocity-lateness"] && v.lateness < 0:
		return usagef("--velocity-lateness must be >= 0, got %s", v.lateness)
	case v.set["alerts"] && v.alerts != "":
		return checkTopic("alerts", v.alerts, false)
	}
	return nil
}

// config is the rules' velocity configuration (disabled without a window).
func (v *velocityOptions) config() attribution.VelocityConfig {
	if v.window <= 0 {
		return attribution.VelocityConfig{}
	}
	c := attribution.DefaultVelocity(v.window)
	c.Threshold = v.threshold
	if v.set["velocity-bucket"] {
		c.Bucket = v.bucket
	}
	if v.set["velocity-lateness"] {
		c.Lateness = v.lateness
	}
	return c
}

// alertsTopic is where alerts go: --alerts, else the output topic.
func (v *velocityOptions) alertsTopic(output string) string {
	if v.alerts != "" {
		return v.alerts
	}
	return output
}

// describe is a one-line summary for logs and reports.
func (v *velocityOptions) describe() string {
	c := v.config()
	return "window " + window.FormatDuration(c.Window) + ", bucket " + window.FormatDuration(c.Bucket) +
		", lateness " + window.FormatDuration(c.Lateness) + ", alert above " + strconv.FormatInt(c.Threshold, 10) + " clicks"
}
