package metricshttp

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// Problem is one breach of the Prometheus naming and exposition rules that
// Lint found: the family (or sample) it is about and what is wrong.
type Problem struct {
	Metric, Text string
}

func (p Problem) String() string { return p.Metric + ": " + p.Text }

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	camelCase  = regexp.MustCompile(`[a-z][A-Z]`)
)

// nonBaseUnits are name components that are not Prometheus base units,
// with the base unit to use (https://prometheus.io/docs/practices/naming/),
// and abbreviations of units, which names spell out.
var (
	nonBaseUnits = map[string]string{
		"milliseconds": "seconds", "microseconds": "seconds", "nanoseconds": "seconds",
		"minutes": "seconds", "hours": "seconds", "days": "seconds", "weeks": "seconds",
		"kilobytes": "bytes", "megabytes": "bytes", "gigabytes": "bytes", "kibibytes": "bytes",
		"mebibytes": "bytes", "gibibytes": "bytes", "bits": "bytes", "percent": "ratio",
	}
	unitAbbreviations = map[string]bool{
		"s": true, "ms": true, "us": true, "ns": true, "sec": true, "secs": true, "min": true,
		"b": true, "kb": true, "mb": true, "gb": true, "h": true, "d": true, "m": true,
	}
)

// Lint reads an exposition in the Prometheus text format (0.0.4) and
// returns every breach of the naming rules and of the format's structure:
//
//   - metric names match [a-zA-Z_:][a-zA-Z0-9_:]* (and hold no ':', which
//     is for recording rules), label names [a-zA-Z_][a-zA-Z0-9_]*, both
//     in snake_case;
//   - every family has one non-empty HELP and one TYPE, before its
//     samples, and appears once (its samples are contiguous);
//   - counters end in _total and nothing else does; _count, _sum and
//     _bucket are reserved to summaries and histograms, the quantile and
//     le labels too; no name contains its type;
//   - units are base units spelled out (_seconds, _bytes, _ratio):
//     no _milliseconds, _ms, _percent, _kb ...;
//   - every sample belongs to the family declared last, parses as name,
//     optional {labels} and a float value, and no two samples of a family
//     have the same labels.
func Lint(r io.Reader) ([]Problem, error) {
	l := &linter{help: map[string]int{}, typ: map[string]string{}, done: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		l.line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the exposition: %w", err)
	}
	l.finish()
	return l.problems, nil
}

type linter struct {
	problems []Problem
	help     map[string]int    // family -> HELP lines
	typ      map[string]string // family -> TYPE
	done     map[string]bool   // families whose samples have ended
	current  string            // the family being read
	seen     map[string]bool   // label sets of the current family's samples
}

func (l *linter) report(metric, format string, args ...any) {
	l.problems = append(l.problems, Problem{metric, fmt.Sprintf(format, args...)})
}

func (l *linter) begin(name string) {
	if name == l.current {
		return
	}
	if l.current != "" {
		l.done[l.current] = true
	}
	if l.done[name] {
		l.report(name, "family appears more than once (its lines are not contiguous)")
	}
	l.current, l.seen = name, map[string]bool{}
}

func (l *linter) line(s string) {
	switch {
	case strings.TrimSpace(s) == "":
		return
	case strings.HasPrefix(s, "# HELP "):
		name, text, _ := strings.Cut(s[len("# HELP "):], " ")
		l.begin(name)
		l.help[name]++
		if l.help[name] > 1 {
			l.report(name, "more than one HELP line")
		}
		if strings.TrimSpace(text) == "" {
			l.report(name, "empty HELP text")
		}
		return
	case strings.HasPrefix(s, "# TYPE "):
		name, typ, _ := strings.Cut(s[len("# TYPE "):], " ")
		l.begin(name)
		if _, dup := l.typ[name]; dup {
			l.report(name, "more than one TYPE line")
		}
		l.typ[name] = typ
		l.family(name, typ)
		return
	case strings.HasPrefix(s, "#"):
		return
	}
	l.sample(s)
}

// family checks a family's name against its type.
func (l *linter) family(name, typ string) {
	if !metricName.MatchString(name) {
		l.report(name, "invalid metric name")
	}
	if strings.Contains(name, ":") {
		l.report(name, "metric names should not contain ':' (reserved for recording rules)")
	}
	if camelCase.MatchString(name) {
		l.report(name, "metric names should be snake_case, not camelCase")
	}
	switch typ {
	case "counter", "gauge", "summary", "histogram", "untyped":
	default:
		l.report(name, "unknown TYPE %q", typ)
	}
	total := strings.HasSuffix(name, "_total")
	switch {
	case typ == "counter" && !total:
		l.report(name, `counter names should end in "_total"`)
	case typ != "counter" && typ != "untyped" && total:
		l.report(name, `only counter names should end in "_total"`)
	}
	if typ != "histogram" && strings.HasSuffix(name, "_bucket") {
		l.report(name, `"_bucket" is reserved for histograms`)
	}
	if typ != "histogram" && typ != "summary" && (strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")) {
		l.report(name, `"_count" and "_sum" are reserved for summaries and histograms`)
	}
	parts := strings.Split(strings.ToLower(name), "_")
	for _, p := range parts {
		if base, ok := nonBaseUnits[p]; ok {
			l.report(name, "use the base unit %q instead of %q", base, p)
		}
		if unitAbbreviations[p] {
			l.report(name, "spell the unit out (base units: seconds, bytes), not %q", p)
		}
	}
	for _, t := range []string{"counter", "gauge", "summary", "histogram"} {
		if slices.Contains(parts[1:], t) {
			l.report(name, "metric names should not contain their type %q", t)
		}
	}
}

// sample checks one sample line against the current family.
func (l *linter) sample(s string) {
	name, rest := s, ""
	if i := strings.IndexAny(s, "{ "); i >= 0 {
		name, rest = s[:i], s[i:]
	}
	fam := l.current
	typ := l.typ[fam]
	switch {
	case name == fam:
	case (typ == "summary" || typ == "histogram") && (name == fam+"_sum" || name == fam+"_count"):
	case typ == "histogram" && name == fam+"_bucket":
	default:
		l.report(name, "sample outside its family's HELP and TYPE (current family %q)", fam)
		return
	}
	labels := ""
	if strings.HasPrefix(rest, "{") {
		end := closingBrace(rest)
		if end < 0 {
			l.report(name, "unterminated label set: %s", s)
			return
		}
		labels, rest = rest[1:end], rest[end+1:]
	}
	pairs, err := parseLabels(labels)
	if err != nil {
		l.report(name, "%v: %s", err, s)
		return
	}
	for _, p := range pairs {
		switch {
		case !labelName.MatchString(p) || strings.HasPrefix(p, "__"):
			l.report(name, "invalid label name %q", p)
		case camelCase.MatchString(p):
			l.report(name, "label names should be snake_case, not camelCase: %q", p)
		case p == "quantile" && typ != "summary":
			l.report(name, `the "quantile" label is reserved for summaries`)
		case p == "le" && typ != "histogram":
			l.report(name, `the "le" label is reserved for histograms`)
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 || !isFloat(fields[0]) {
		l.report(name, "a sample is a name, labels, a value and an optional timestamp: %s", s)
	}
	key := name + "{" + labels + "}"
	if l.seen[key] {
		l.report(name, "duplicate sample %s", key)
	}
	l.seen[key] = true
}

func (l *linter) finish() {
	for name := range l.typ {
		if l.help[name] == 0 {
			l.report(name, "no HELP line")
		}
	}
	for name := range l.help {
		if _, ok := l.typ[name]; !ok {
			l.report(name, "no TYPE line")
		}
	}
}

// closingBrace returns the index of the '}' that closes s's label set,
// skipping quoted values.
func closingBrace(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

// parseLabels returns the label names of a label set's inside
// (name="value",...).
func parseLabels(s string) ([]string, error) {
	var names []string
	for s != "" {
		name, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return nil, fmt.Errorf("malformed label set")
		}
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' {
				i++
			}
		}
		if i >= len(rest) {
			return nil, fmt.Errorf("unterminated label value")
		}
		names = append(names, strings.TrimSpace(name))
		s = strings.TrimPrefix(rest[i+1:], ",")
	}
	return names, nil
}

func isFloat(s string) bool {
	switch s {
	case "+Inf", "-Inf", "NaN":
		return true
	}
	var f float64
	_, err := fmt.Sscan(s, &f)
	return err == nil
}
