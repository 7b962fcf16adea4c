package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns a flag set whose errors are returned, not printed: the
// caller reports them once, as usage errors, with one line pointing to
// --help. -h and --help print the help to stdout.
func newFlagSet(name, synopsis string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet("differential "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		var b strings.Builder
		fmt.Fprintf(&b, "Usage: differential %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		writeFlags(&b, fs)
		_, _ = io.WriteString(e.stdout, b.String())
	}
	return fs
}

// parseFlags parses args; a parse error or a stray argument is a usage error.
// The help is printed for -h/--help only: the flag package would print it
// for every error too.
func parseFlags(fs *flag.FlagSet, args []string) error {
	help := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = help
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return err
		}
		return &usageError{flagError(fs, err)}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// flagError rewrites the flag package's messages with the --flag spelling
// the help and README use, and suggests the nearest flag for an unknown one.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		return fmt.Errorf("unknown flag --%s%s", name, suggestFlag(fs, name))
	}
	msg = strings.Replace(msg, "for flag -", "for flag --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	return errors.New(msg)
}

// suggestFlag names the flag nearest to an unknown name, if one is near.
func suggestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(strings.ToLower(name), f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return " (did you mean --" + best + "?)"
}

// writeFlags prints every flag as the README spells it (--name value),
// with its default unless the default is a zero value or the help text
// already gives one.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if !zeroDefault(f.DefValue) && !strings.Contains(usage, "(default") {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += " (default " + f.DefValue + ")"
			}
		}
		_, _ = io.WriteString(w, line+"\n")
	})
}

func zeroDefault(v string) bool {
	switch v {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// durationValue is a time.Duration flag that also accepts whole days
// ("7d", "1d12h"), since the attribution windows are days long.
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return formatDuration(*d.p)
}

func (d durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d.p = v
	return nil
}

var daysPrefix = regexp.MustCompile(`^(\d+)d`)

// parseDuration is time.ParseDuration plus a leading "<n>d" (24h days).
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days time.Duration
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil || n > 100*365 {
			return 0, fmt.Errorf("duration %q: too many days", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[len(m[0]):]
		if s == "" {
			return days, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration (e.g. 500ms, 30s, 2h, 7d): %q", s)
	}
	return days + v, nil
}

// formatDuration prints whole days as "<n>d" so defaults read naturally.
func formatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// listValue is a comma-separated list flag (brokers).
type listValue struct{ p *[]string }

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listValue) Set(s string) error {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	*l.p = out
	return nil
}

// enumValue is a string flag restricted to a set of values.
type enumValue struct {
	p       *string
	allowed []string
}

func (v enumValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v enumValue) Set(s string) error {
	if !slices.Contains(v.allowed, s) {
		named := slices.DeleteFunc(slices.Clone(v.allowed), func(a string) bool { return a == "" })
		return fmt.Errorf("must be one of %s", strings.Join(named, ", "))
	}
	*v.p = s
	return nil
}

// checkBrokers validates a broker list for the flag named flagName.
func checkBrokers(flagName string, brokers []string) error {
	if len(brokers) == 0 {
		return usagef("--%s is required: the Kafka bootstrap brokers as host:port[,host:port...]", flagName)
	}
	for _, b := range brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return usagef("--%s: %q is not host:port", flagName, b)
		}
	}
	return nil
}

// Kafka's rule for topic names.
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func checkTopic(flagName, topic string, required bool) error {
	switch {
	case topic == "" && required:
		return usagef("--%s is required", flagName)
	case topic == "":
		return nil
	case !legalTopic.MatchString(topic) || topic == "." || topic == "..":
		return usagef("--%s: %q is not a legal Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)", flagName, topic)
	}
	return nil
}
