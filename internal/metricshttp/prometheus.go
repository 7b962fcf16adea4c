package metricshttp

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	metrics "github.com/rcrowley/go-metrics"
)

// ContentType is the Prometheus text exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

var quantiles = []float64{0.5, 0.75, 0.95, 0.99}

// Handler serves reg in the Prometheus text format.
func Handler(reg metrics.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		_ = Write(w, reg)
	})
}

// family is one exported metric family: a TYPE line and its samples.
type family struct {
	name, typ, help string
	samples         []sample
	seen            map[string]bool // sample keys, to drop collisions
}

type sample struct {
	name   string // family name plus a suffix (_sum, _count) or not
	labels []label
	value  float64
}

type exposition struct {
	fams map[string]*family
}

// Write writes every metric of reg to w in the Prometheus text format,
// families sorted by name, samples in registry name order.
func Write(w io.Writer, reg metrics.Registry) error {
	type entry struct {
		name string
		m    any
	}
	var all []entry
	reg.Each(func(name string, m any) { all = append(all, entry{name, m}) })
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	e := &exposition{fams: map[string]*family{}}
	for _, x := range all {
		e.add(x.name, x.m)
	}
	names := make([]string, 0, len(e.fams))
	for n := range e.fams {
		names = append(names, n)
	}
	slices.Sort(names)
	bw := bufio.NewWriter(w)
	for _, n := range names {
		writeFamily(bw, e.fams[n])
	}
	return bw.Flush()
}

// add exports one registry metric; unknown kinds (healthchecks) are skipped.
func (e *exposition) add(name string, m any) {
	s := seriesOf(name)
	help := helpOf(s.base)
	switch v := m.(type) {
	case metrics.Gauge:
		if s.monotone {
			e.put(s.base+"_total", "counter", help, sample{s.base + "_total", s.labels, float64(v.Value())})
		} else {
			e.put(s.base, "gauge", help, sample{s.base, s.labels, float64(v.Value())})
		}
	case metrics.GaugeFloat64:
		e.put(s.base, "gauge", help, sample{s.base, s.labels, v.Value()})
	case metrics.Counter:
		e.put(s.base, "gauge", help, sample{s.base, s.labels, float64(v.Count())})
	case metrics.Meter:
		snap := v.Snapshot()
		e.put(s.base+"_total", "counter", help, sample{s.base + "_total", s.labels, float64(snap.Count())})
		e.rates(s, help, snap.Rate1(), snap.Rate5(), snap.Rate15(), snap.RateMean())
	case metrics.Histogram:
		snap := v.Snapshot()
		e.summary(s.base, help, s.labels, snap.Percentiles(quantiles), float64(snap.Sum()), snap.Count(), 1)
	case metrics.Timer:
		snap := v.Snapshot()
		e.summary(s.base+"_seconds", help, s.labels, snap.Percentiles(quantiles), float64(snap.Sum()), snap.Count(), 1e-9)
		e.put(s.base+"_rate1", "gauge", help+" (per second, 1-minute average)", sample{s.base + "_rate1", s.labels, snap.Rate1()})
	}
}

func (e *exposition) rates(s series, help string, r1, r5, r15, mean float64) {
	for _, r := range []struct {
		suffix string
		v      float64
	}{{"_rate1", r1}, {"_rate5", r5}, {"_rate15", r15}, {"_rate_mean", mean}} {
		n := s.base + r.suffix
		e.put(n, "gauge", help+" (per second)", sample{n, s.labels, r.v})
	}
}

func (e *exposition) summary(name, help string, labels []label, qs []float64, sum float64, count int64, scale float64) {
	f := e.family(name, "summary", help)
	if f == nil || !f.claim(labels) {
		return
	}
	for i, q := range quantiles {
		ls := append(slices.Clone(labels), label{"quantile", strconv.FormatFloat(q, 'g', -1, 64)})
		f.samples = append(f.samples, sample{name, ls, qs[i] * scale})
	}
	f.samples = append(f.samples, sample{name + "_sum", labels, sum * scale}, sample{name + "_count", labels, float64(count)})
}

// put adds a one-sample series to the family name of type typ.
func (e *exposition) put(name, typ, help string, s sample) {
	f := e.family(name, typ, help)
	if f == nil || !f.claim(s.labels) {
		return
	}
	f.samples = append(f.samples, s)
}

// family returns the family, creating it; nil when the name is already taken
// by a family of another type.
func (e *exposition) family(name, typ, help string) *family {
	f, ok := e.fams[name]
	if !ok {
		f = &family{name: name, typ: typ, help: help, seen: map[string]bool{}}
		e.fams[name] = f
	}
	if f.typ != typ {
		return nil
	}
	return f
}

// claim reports whether the series with these labels is new in the family.
func (f *family) claim(labels []label) bool {
	var b strings.Builder
	for _, l := range labels {
		b.WriteString(l.name)
		b.WriteByte(0)
		b.WriteString(l.value)
		b.WriteByte(0)
	}
	k := b.String()
	if f.seen[k] {
		return false
	}
	f.seen[k] = true
	return true
}

func writeFamily(w *bufio.Writer, f *family) {
	w.WriteString("# HELP " + f.name + " " + strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(f.help) + "\n")
	w.WriteString("# TYPE " + f.name + " " + f.typ + "\n")
	for _, s := range f.samples {
		w.WriteString(s.name)
		if len(s.labels) > 0 {
			w.WriteByte('{')
			for i, l := range s.labels {
				if i > 0 {
					w.WriteByte(',')
				}
				w.WriteString(l.name + `="` + escapeLabel(l.value) + `"`)
			}
			w.WriteByte('}')
		}
		w.WriteByte(' ')
		w.WriteString(formatValue(s.value))
		w.WriteByte('\n')
	}
}

func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64) // integers (offsets, Unix ms) without an exponent
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// helpOf is the HELP text of the family whose base name is base.
func helpOf(base string) string {
	if m, ok := strings.CutPrefix(base, "sarama_"); ok {
		return "sarama client metric " + m
	}
	m := strings.TrimPrefix(strings.TrimPrefix(base, "differential_stage_"), "differential_partition_")
	if h, ok := engineHelp[m]; ok {
		return h
	}
	return "Engine metric " + base
}

// engineHelp documents the engine's series (chain/stats.go), by the metric
// part of the exported name.
var engineHelp = map[string]string{
	"position":              "Stage position next(S,p): every offset below it is complete.",
	"watermark_unix_ms":     "Stage watermark wm(S,p): largest event time below the position, Unix ms (0: none).",
	"lag":                   "High watermark minus the stage position (-1: high watermark unknown).",
	"mode_polling":          "1 when the stage reads Kafka itself (polling mode), 0 when it reads the handoff buffer.",
	"mode_switches":         "Switches between buffered and polling mode.",
	"processed":             "Records the stage processed.",
	"skipped":               "Records the stage skipped (filtered out or duplicates).",
	"dead_lettered":         "Records the stage sent to the dead-letter topic.",
	"retries":               "Processor retries.",
	"idle_releases":         "Records the gate let through because the leader was idle.",
	"in_flight":             "Records begun and not completed.",
	"gap_offsets":           "Leader position minus this stage's position.",
	"gap_ms":                "Leader watermark minus this stage's watermark, ms.",
	"last_progress_unix_ms": "When the stage position last moved (checked every commit interval), Unix ms.",
	"committed":             "Last offset Kafka acknowledged for the partition (-1: none).",
	"commits":               "Commits Kafka acknowledged.",
	"commit_errors":         "Commits that failed.",
	"high_watermark":        "Partition high watermark as last seen (-1: unknown).",
	"buffer_fill":           "Records in the partition's handoff buffer.",
}
