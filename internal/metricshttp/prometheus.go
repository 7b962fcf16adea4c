package metricshttp

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/chain"
)

// ContentType is the media type /metrics answers a plain scrape with: the
// Prometheus text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

var quantiles = []float64{0.5, 0.75, 0.95, 0.99}

// Collector is a prometheus.Collector over a go-metrics registry: every
// Collect reads the registry and exports each metric under the name and
// labels the package documentation gives. It is an unchecked collector
// (Describe sends nothing): the registry's metrics come and go with the
// partitions a member owns. Safe for concurrent use.
type Collector struct {
	reg    metrics.Registry
	opts   Options
	topics map[string]string
}

// Options are what the Collector exports beside the registry.
type Options struct {
	// Topics are the topics the process reads and writes: sarama writes a
	// topic into a per-topic metric's name with '.' as '_', and a topic
	// named here is exported under its real name in the topic label.
	Topics []string
	// Stats, when set, is the chain's snapshot (chain.(*Chain).Stats), and
	// Stages its stage names: a partition that is assigned but has not
	// started its stages (it waits for its first record, so it has nothing
	// to do) is exported with zero-valued series (lag 0, no records
	// processed) instead of none.
	Stats  func() []chain.PartitionStats
	Stages []string
	// BuildInfo, when set, are the labels of differential_build_info
	// (always 1): version, revision, goversion.
	BuildInfo map[string]string
}

// NewCollector returns the Collector of reg.
func NewCollector(reg metrics.Registry, o Options) *Collector {
	return &Collector{reg: reg, opts: o, topics: topicNames(o.Topics)}
}

// Describe implements prometheus.Collector; it sends nothing (unchecked).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range c.families() {
		descs := map[string]*prometheus.Desc{}
		for _, s := range f.series {
			names := make([]string, len(s.labels))
			values := make([]string, len(s.labels))
			for i, l := range s.labels {
				names[i], values[i] = l.name, l.value
			}
			key := strings.Join(names, "\x00")
			d, ok := descs[key]
			if !ok {
				d = prometheus.NewDesc(f.name, f.help, names, nil)
				descs[key] = d
			}
			var m prometheus.Metric
			var err error
			switch f.typ {
			case counter:
				m, err = prometheus.NewConstMetric(d, prometheus.CounterValue, s.value, values...)
			case gauge:
				m, err = prometheus.NewConstMetric(d, prometheus.GaugeValue, s.value, values...)
			case summary:
				m, err = prometheus.NewConstSummary(d, s.count, s.sum, s.quantiles, values...)
			}
			if err == nil { // label names come from sanitize: always valid
				ch <- m
			}
		}
	}
}

// NewRegistry returns a Prometheus registry serving reg (through its
// Collector) and the Go runtime (go_*) and process (process_*) collectors.
func NewRegistry(reg metrics.Registry, o Options) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(NewCollector(reg, o),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves NewRegistry(reg) through promhttp: the text format (or
// whichever format the scraper negotiates), gzip when asked for. A metric
// that cannot be gathered is left out and the rest is served.
func Handler(reg metrics.Registry, o Options) http.Handler {
	return promhttp.HandlerFor(NewRegistry(reg, o), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Write writes reg's metrics alone (no Go or process collector) to w in
// the text format, families sorted by name.
func Write(w io.Writer, reg metrics.Registry, o Options) error {
	r := prometheus.NewRegistry()
	if err := r.Register(NewCollector(reg, o)); err != nil {
		return err
	}
	fams, err := r.Gather()
	if err != nil {
		return err
	}
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(w, f); err != nil {
			return err
		}
	}
	return nil
}

// family is one exported metric family.
type family struct {
	name, help string
	typ        kind
	series     []seriesValue
	seen       map[string]bool // label sets, to drop collisions
}

// seriesValue is one series: a value, or a summary's count, sum and quantiles.
type seriesValue struct {
	labels    []label
	value     float64
	count     uint64
	sum       float64
	quantiles map[float64]float64
}

// kind is a family's Prometheus type.
type kind int

const (
	counter kind = iota
	gauge
	summary
)

type exposition struct {
	fams map[string]*family
}

// families maps the registry's metrics onto families, in registry name
// order so the first of two colliding names wins, and returns them sorted
// by name.
func (c *Collector) families() []*family {
	type entry struct {
		name string
		m    any
	}
	var all []entry
	c.reg.Each(func(name string, m any) { all = append(all, entry{name, m}) })
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	e := &exposition{fams: map[string]*family{}}
	for _, x := range all {
		e.add(x.name, x.m, c.topics)
	}
	if c.opts.Stats != nil {
		e.waiting(c.opts.Stats(), c.opts.Stages)
	}
	if len(c.opts.BuildInfo) > 0 {
		var labels []label
		for _, k := range slices.Sorted(maps.Keys(c.opts.BuildInfo)) {
			labels = append(labels, label{k, c.opts.BuildInfo[k]})
		}
		e.put("differential_build_info", gauge, "The running binary: its version, VCS revision and Go version (always 1).",
			seriesValue{labels: labels, value: 1})
	}
	out := make([]*family, 0, len(e.fams))
	for _, f := range e.fams {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return out
}

// add exports one registry metric; unknown kinds (healthchecks) are skipped.
func (e *exposition) add(name string, m any, topics map[string]string) {
	s := seriesOf(name, topics)
	help := s.help
	if help == "" {
		help = fallbackHelp(name)
	}
	x := s.scale
	switch v := m.(type) {
	case metrics.Gauge:
		if s.monotone {
			e.put(s.base+"_total", counter, help, seriesValue{labels: s.labels, value: float64(v.Value()) * x})
		} else {
			e.put(s.base, gauge, help, seriesValue{labels: s.labels, value: float64(v.Value()) * x})
		}
	case metrics.GaugeFloat64:
		e.put(s.base, gauge, help, seriesValue{labels: s.labels, value: v.Value() * x})
	case metrics.Counter:
		if s.monotone {
			e.put(s.base+"_total", counter, help, seriesValue{labels: s.labels, value: float64(v.Count()) * x})
		} else {
			e.put(s.base, gauge, help, seriesValue{labels: s.labels, value: float64(v.Count()) * x})
		}
	case metrics.Meter:
		snap := v.Snapshot()
		e.put(s.base+"_total", counter, help, seriesValue{labels: s.labels, value: float64(snap.Count()) * x})
		e.rates(s, help, snap.Rate1()*x, snap.Rate5()*x, snap.Rate15()*x, snap.RateMean()*x)
	case metrics.Histogram:
		snap := v.Snapshot()
		e.summary(s.base, help, s.labels, snap.Percentiles(quantiles), float64(snap.Sum()), snap.Count(), x)
	case metrics.Timer:
		snap := v.Snapshot()
		e.summary(s.base+"_seconds", help, s.labels, snap.Percentiles(quantiles), float64(snap.Sum()), snap.Count(), 1e-9)
		e.put(s.base+"_rate1", gauge, help+" (per second, 1-minute average)", seriesValue{labels: s.labels, value: snap.Rate1()})
	}
}

// fallbackHelp describes a metric that no table of this package knows (a
// metric a newer sarama or another component added), by its registry name.
func fallbackHelp(name string) string {
	if strings.HasPrefix(name, "differential.") {
		return "Engine metric registered as " + name + "."
	}
	return "Kafka client (sarama) metric registered as " + name + "."
}

// waiting exports zero-valued series for every partition of stats that is
// assigned but has not started its stages (see Options.Stats); the
// partitions that have are in the registry already, and put keeps the
// first series of a label set.
func (e *exposition) waiting(stats []chain.PartitionStats, stages []string) {
	for _, p := range stats {
		if len(p.Stages) > 0 || p.Restore.Restoring {
			continue
		}
		pv := func(metric string, v int64) {
			s := seriesOf(fmt.Sprintf("%s%s.%d.%s", partitionPrefix, p.Topic, p.Partition, metric), nil)
			typ, name := gauge, s.base
			if s.monotone {
				typ, name = counter, s.base+"_total"
			}
			e.put(name, typ, s.help, seriesValue{labels: s.labels, value: float64(v)})
		}
		pv("committed", p.Committed)
		pv("commits", p.Commits)
		pv("commit_errors", p.CommitErrors)
		pv("high_watermark", p.HighWatermark)
		pv("buffer_fill", 0)
		for i, st := range stages {
			metricsOf := []string{"lag", "mode_polling", "mode_switches", "processed", "skipped", "dead_lettered",
				"retries", "idle_releases", "in_flight"}
			if i > 0 {
				metricsOf = append(metricsOf, "gap_offsets", "key_gated")
			}
			for _, metric := range metricsOf {
				s := seriesOf(fmt.Sprintf("%s%s.%d.%s.%s", stagePrefix, p.Topic, p.Partition, st, metric), nil)
				typ, name := gauge, s.base
				if s.monotone {
					typ, name = counter, s.base+"_total"
				}
				e.put(name, typ, s.help, seriesValue{labels: s.labels})
			}
		}
	}
}

func (e *exposition) rates(s series, help string, r1, r5, r15, mean float64) {
	for _, r := range []struct {
		suffix string
		v      float64
	}{{"_rate1", r1}, {"_rate5", r5}, {"_rate15", r15}, {"_rate_mean", mean}} {
		e.put(s.base+r.suffix, gauge, help+" (per second)", seriesValue{labels: s.labels, value: r.v})
	}
}

func (e *exposition) summary(name, help string, labels []label, qs []float64, sum float64, count int64, scale float64) {
	q := make(map[float64]float64, len(quantiles))
	for i, p := range quantiles {
		q[p] = qs[i] * scale
	}
	e.put(name, summary, help, seriesValue{labels: labels, count: uint64(max(count, 0)), sum: sum * scale, quantiles: q})
}

// put adds a series to the family name of type typ, unless the name is
// taken by a family of another type or the family has the label set.
func (e *exposition) put(name string, typ kind, help string, s seriesValue) {
	f, ok := e.fams[name]
	if !ok {
		f = &family{name: name, typ: typ, help: help, seen: map[string]bool{}}
		e.fams[name] = f
	}
	if f.typ != typ {
		return
	}
	var b strings.Builder
	for _, l := range s.labels {
		b.WriteString(l.name + "\x00" + l.value + "\x00")
	}
	if k := b.String(); !f.seen[k] {
		f.seen[k] = true
		f.series = append(f.series, s)
	}
}

// engineHelp documents the engine's series (chain/stats.go), by the metric
// part of the registry name (chainmetrics), and the exactly-once series by
// their family's base name.
var engineHelp = map[string]string{
	"position":                   "Stage position next(S,p): every offset below it is complete.",
	"watermark_unix_ms":          "Stage watermark wm(S,p): largest event time below the position, Unix time in seconds (0: none).",
	"lag":                        "High watermark minus the stage position (-1: high watermark unknown; 0 for a partition that has had no record).",
	"mode_polling":               "1 when the stage reads Kafka itself (polling mode), 0 when it reads the handoff buffer.",
	"mode_switches":              "Switches between buffered and polling mode.",
	"processed":                  "Records the stage processed.",
	"skipped":                    "Records the stage skipped (filtered out or duplicates).",
	"dead_lettered":              "Records the stage sent to the dead-letter topic.",
	"retries":                    "Processor retries.",
	"idle_releases":              "Records the gate let through because the leader was idle.",
	"in_flight":                  "Records begun and not completed.",
	"gap_offsets":                "Leader position minus this stage's position.",
	"gap_ms":                     "Leader watermark minus this stage's watermark, seconds.",
	"key_gated":                  "Records of a key-scoped stage waiting in the key gate for their leader's progress on their key.",
	"last_progress_unix_ms":      "When the stage position last moved (checked every commit interval), Unix time in seconds.",
	"committed":                  "Last offset Kafka acknowledged for the partition (-1: none).",
	"commits":                    "Commits Kafka acknowledged.",
	"commit_errors":              "Commits that failed.",
	"high_watermark":             "Partition high watermark as last seen (-1: unknown).",
	"buffer_fill":                "Records in the partition's handoff buffer.",
	"restore_records":            "Changelog records applied while restoring the partition's state at its assignment.",
	"restore_bytes":              "Changelog bytes applied while restoring the partition's state at its assignment.",
	"restoring":                  "1 while the partition's state is being restored from the changelog, else 0.",
	"restore_duration_seconds":   "How long the partition's restore has taken (or took), seconds.",
	"differential_txn_committed": "Exactly-once transactions committed.",
	"differential_txn_aborted":   "Exactly-once transactions aborted, by cause.",
	"differential_txn_cycle_ms":  "Exactly-once commit cycles, from the cut to the end of the commit or abort, seconds.",
	"differential_txn_records":   "Outputs, dead letters and changelog records per committed transaction.",
	"differential_txn_fenced":    "Transactional producer sessions replaced because they were fenced.",
}

// windowHelp documents a window counter's series (processors/window).
var windowHelp = map[string]string{
	"counted":     "Events the window counter counted.",
	"late":        "Events the window counter dropped as later than its lateness.",
	"keys":        "Keys the window counter holds a count for.",
	"state_bytes": "Bytes of the window counter's state.",
}
