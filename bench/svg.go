package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The SVG has one row per workload result (C's grid points are summarised
// in one bar chart): throughput over time in the throughput phase, the
// latency CDFs of both comparisons, and the strongest micro-batch's batch
// size sweep.

const (
	panelW, panelH = 440, 270
	padL, padR     = 64, 16
	padT, padB     = 34, 40
)

const (
	colorChain     = "#1f77b4"
	colorStrongest = "#2ca02c"
	colorDesign6   = "#ff7f0e"
)

var designColors = []struct {
	name  string
	color string
	get   func(*WorkloadResult) *DesignResult
}{
	{"chain", colorChain, func(w *WorkloadResult) *DesignResult { return w.Chain }},
	{"strongest micro-batch", colorStrongest, func(w *WorkloadResult) *DesignResult { return w.Strongest }},
	{"micro-batch baseline", colorDesign6, func(w *WorkloadResult) *DesignResult { return w.Design6 }},
}

// WriteSVG draws the charts.
func (r *Report) WriteSVG(w io.Writer) error {
	var rows []*WorkloadResult
	var grid []*WorkloadResult
	for i := range r.Workloads {
		if r.Workloads[i].Workload == "C" {
			grid = append(grid, &r.Workloads[i])
		} else {
			rows = append(rows, &r.Workloads[i])
		}
	}
	n := len(rows)
	if len(grid) > 0 {
		n++
	}
	width, height := 3*panelW+40, n*(panelH+20)+40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="14" font-weight="bold">differential bench: the chain against the strongest micro-batch and the micro-batch baseline (%s, %s, %d CPUs)</text>`+"\n",
		html.EscapeString(r.Broker), r.GoVersion, r.CPUs)
	y := 40
	for _, wr := range rows {
		title := fmt.Sprintf("%s: P=%d, W=%d", wr.Workload, wr.Partitions, wr.Workers)
		throughputPanel(&b, 0, y, title, wr)
		latencyPanel(&b, panelW+20, y, title, wr)
		sweepPanel(&b, 2*panelW+40, y, title, wr)
		y += panelH + 20
	}
	if len(grid) > 0 {
		gridPanel(&b, 0, y, 3*panelW+40, grid)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

type axis struct {
	x0, y0, w, h           float64
	xmin, xmax, ymin, ymax float64
	logX                   bool
}

func (a axis) px(x float64) float64 {
	if a.logX {
		x, lo, hi := math.Log10(math.Max(x, 1e-9)), math.Log10(a.xmin), math.Log10(a.xmax)
		return a.x0 + (x-lo)/(hi-lo)*a.w
	}
	return a.x0 + (x-a.xmin)/(a.xmax-a.xmin)*a.w
}

func (a axis) py(y float64) float64 { return a.y0 + a.h - (y-a.ymin)/(a.ymax-a.ymin)*a.h }

func frame(b *strings.Builder, x, y, width int, title, xlabel, ylabel string) axis {
	fmt.Fprintf(b, `<g><rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", x, y, width, panelH)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", x+8, y+16, html.EscapeString(title))
	a := axis{x0: float64(x + padL), y0: float64(y + padT), w: float64(width - padL - padR), h: float64(panelH - padT - padB)}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", a.x0+a.w/2, y+panelH-6, html.EscapeString(xlabel))
	fmt.Fprintf(b, `<text x="%d" y="%.0f" text-anchor="middle" transform="rotate(-90 %d %.0f)">%s</text>`+"\n", x+12, a.y0+a.h/2, x+12, a.y0+a.h/2, html.EscapeString(ylabel))
	return a
}

func (a axis) grid(b *strings.Builder, xticks, yticks []float64, xfmt, yfmt func(float64) string) {
	for _, t := range xticks {
		px := a.px(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, px, a.y0, px, a.y0+a.h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, a.y0+a.h+14, xfmt(t))
	}
	for _, t := range yticks {
		py := a.py(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, a.x0, py, a.x0+a.w, py)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", a.x0-4, py+4, yfmt(t))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#666"/>`+"\n", a.x0, a.y0, a.w, a.h)
}

func polyline(b *strings.Builder, a axis, xs, ys []float64, color string) {
	polylineStyle(b, a, xs, ys, color, "")
}

// polylineStyle draws a line with extra attributes (e.g. a dash pattern).
func polylineStyle(b *strings.Builder, a axis, xs, ys []float64, color, attrs string) {
	if len(xs) == 0 {
		return
	}
	b.WriteString(`<polyline fill="none" stroke-width="1.6" stroke="` + color + `" ` + attrs + ` points="`)
	for i := range xs {
		fmt.Fprintf(b, "%.1f,%.1f ", a.px(xs[i]), a.py(ys[i]))
	}
	b.WriteString("\"/>\n")
}

// legend writes entries at the plot's top left (left) or top right.
func legend(b *strings.Builder, a axis, entries [][2]string, left bool) {
	width := 0
	for _, e := range entries {
		width = max(width, 6*len(e[0])+26)
	}
	for i, e := range entries {
		x, y := a.x0+a.w-float64(width), a.y0+14+float64(i)*14
		if left {
			x = a.x0 + 8
		}
		fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%d" height="14" fill="white" fill-opacity="0.8"/>`, x-2, y-11, width)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x, y-4, x+16, y-4, e[1], x+20, y, html.EscapeString(e[0]))
	}
}

// rate turns a completion curve into records/s over a sliding 200ms window.
func rate(s []seriesPoint) (ts, rs []float64) {
	j := 0
	for i := range s {
		for j < i && s[i].t-s[j].t > 0.2 {
			j++
		}
		if i == j {
			continue
		}
		dt := s[i].t - s[j].t
		ts = append(ts, s[i].t)
		rs = append(rs, float64(s[i].done-s[j].done)/dt)
	}
	return ts, rs
}

func throughputPanel(b *strings.Builder, x, y int, title string, wr *WorkloadResult) {
	a := frame(b, x, y, panelW, title+" — throughput", "seconds since the first record", "records/s (200 ms window)")
	var entries [][2]string
	type line struct {
		ts, rs []float64
		color  string
	}
	var lines []line
	xmax, ymax := 0.1, 1.0
	for _, dc := range designColors {
		d := dc.get(wr)
		if d == nil {
			continue
		}
		ts, rs := rate(d.series)
		lines = append(lines, line{ts, rs, dc.color})
		for i := range ts {
			xmax, ymax = math.Max(xmax, ts[i]), math.Max(ymax, rs[i])
		}
		entries = append(entries, [2]string{fmt.Sprintf("%s %.0f rec/s", shortLabel(d), d.ThroughputRPS), dc.color})
	}
	a.xmin, a.xmax, a.ymin, a.ymax = 0, xmax*1.02, 0, ymax*1.1
	a.grid(b, ticks(0, a.xmax), ticks(0, a.ymax), num, num)
	for _, l := range lines {
		polyline(b, a, l.ts, l.rs, l.color)
	}
	legend(b, a, entries, false)
	b.WriteString("</g>\n")
}

// shortLabel names a design in a legend.
func shortLabel(d *DesignResult) string {
	switch kind(d.Design) {
	case kindStrongest:
		return fmt.Sprintf("strongest mb (%d)", d.BatchSize)
	case kindDesign6:
		return fmt.Sprintf("baseline (%d)", d.BatchSize)
	}
	return designLabel(d)
}

// latencyPanel draws the latency CDFs: the headline comparison solid, the
// DESIGN.md "The micro-batch baseline" comparison dashed (each at its own offered load).
func latencyPanel(b *strings.Builder, x, y int, title string, wr *WorkloadResult) {
	a := frame(b, x, y, panelW, title+" — latency CDF", "input sent → output acknowledged (ms, log scale)", "fraction of outputs")
	type curve struct {
		lat   []time.Duration
		color string
		dash  string
		label string
	}
	var curves []curve
	for _, c := range []struct {
		cmp   *Comparison
		base  *DesignResult
		color string
		dash  string
	}{{wr.VsStrongest, wr.Strongest, colorStrongest, ""}, {wr.VsDesign6, wr.Design6, colorDesign6, `stroke-dasharray="5 3"`}} {
		if c.cmp == nil || c.cmp.Chain == nil || c.cmp.Base == nil || c.base == nil {
			continue
		}
		at := fmt.Sprintf(" @%.0f/s", c.cmp.LatencyRateRPS)
		curves = append(curves,
			curve{c.cmp.Chain.latencies, colorChain, c.dash, "chain" + at},
			curve{c.cmp.Base.latencies, c.color, c.dash, shortLabel(c.base) + at})
	}
	lo, hi := math.Inf(1), 0.0
	for _, c := range curves {
		if len(c.lat) > 0 {
			lo = math.Min(lo, ms(c.lat[0]))
			hi = math.Max(hi, ms(c.lat[len(c.lat)-1]))
		}
	}
	if hi == 0 {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f">not measured</text></g>`+"\n", a.x0+20, a.y0+40)
		return
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.1))))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	a.xmin, a.xmax, a.ymin, a.ymax, a.logX = lo, hi, 0, 1, true
	var xt []float64
	for v := lo; v <= hi*1.001; v *= 10 {
		xt = append(xt, v)
	}
	a.grid(b, xt, []float64{0, 0.25, 0.5, 0.75, 1}, num, func(v float64) string { return fmt.Sprintf("%g", v) })
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/><text x="%.1f" y="%.1f" text-anchor="end" fill="#666">p99</text>`+"\n",
		a.x0, a.py(0.99), a.x0+a.w, a.py(0.99), a.x0+a.w-4, a.py(0.99)+12)
	var entries [][2]string
	for _, c := range curves {
		n := len(c.lat)
		if n == 0 {
			continue
		}
		var xs, ys []float64
		step := max(n/400, 1)
		for i := 0; i < n; i += step {
			xs = append(xs, ms(c.lat[i]))
			ys = append(ys, float64(i+1)/float64(n))
		}
		xs, ys = append(xs, ms(c.lat[n-1])), append(ys, 1)
		polylineStyle(b, a, xs, ys, c.color, c.dash)
		entries = append(entries, [2]string{fmt.Sprintf("%s p99 %s", c.label, durText(quantile(c.lat, .99))), c.color})
	}
	if c := wr.VsStrongest; c != nil && (c.RulesFloorP99ms != nil || c.FloorP99ms != nil) {
		fl, name := c.RulesFloorP99ms, "event-time floor p99"
		if fl == nil {
			fl, name = c.FloorP99ms, "one-horizon gate floor p99"
		}
		x := a.px(math.Max(*fl, lo))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="2 2"/>`+"\n", x, a.y0, x, a.y0+a.h)
		entries = append(entries, [2]string{fmt.Sprintf("%s %.1fms (dotted)", name, *fl), "#999"})
	}
	legend(b, a, entries, true)
	b.WriteString("</g>\n")
}

// sweepPanel draws the strongest micro-batch's throughput over its batch
// size, with its bound at each size (dashed), and the chain's and DESIGN
// the micro-batch baseline's throughput as horizontal lines.
func sweepPanel(b *strings.Builder, x, y int, title string, wr *WorkloadResult) {
	a := frame(b, x, y, panelW, title+" — micro-batch sweep", "batch size (records, log scale)", "records/s")
	var xs, ys, bx, by []float64
	for _, sp := range wr.Sweep {
		if sp.Result == nil {
			continue
		}
		xs, ys = append(xs, float64(sp.BatchSize)), append(ys, sp.Result.ThroughputRPS)
		if e := sp.Result.EfficiencyOwn; e != nil && *e > 0 {
			bx, by = append(bx, float64(sp.BatchSize)), append(by, sp.Result.ThroughputRPS / *e)
		}
	}
	if len(xs) == 0 || wr.Chain == nil {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f">no sweep</text></g>`+"\n", a.x0+20, a.y0+40)
		return
	}
	ymax := wr.Chain.ThroughputRPS
	for _, v := range append(slices.Clone(ys), by...) {
		ymax = math.Max(ymax, v)
	}
	lo := math.Pow(10, math.Floor(math.Log10(xs[0])))
	hi := math.Pow(10, math.Ceil(math.Log10(xs[len(xs)-1]*1.01)))
	a.xmin, a.xmax, a.ymin, a.ymax, a.logX = lo, hi, 0, ymax*1.15, true
	var xt []float64
	for v := lo; v <= hi*1.001; v *= 10 {
		xt = append(xt, v)
	}
	a.grid(b, xt, ticks(0, a.ymax), num, num)
	hline := func(v float64, color, attrs string) {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.6" %s/>`+"\n", a.x0, a.py(v), a.x0+a.w, a.py(v), color, attrs)
	}
	entries := [][2]string{{fmt.Sprintf("chain %.0f rec/s", wr.Chain.ThroughputRPS), colorChain}}
	hline(wr.Chain.ThroughputRPS, colorChain, "")
	if d := wr.Design6; d != nil {
		hline(d.ThroughputRPS, colorDesign6, "")
		entries = append(entries, [2]string{fmt.Sprintf("baseline (%d) %.0f rec/s", d.BatchSize, d.ThroughputRPS), colorDesign6})
	}
	polyline(b, a, xs, ys, colorStrongest)
	for i := range xs {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, a.px(xs[i]), a.py(ys[i]), colorStrongest)
	}
	entries = append(entries, [2]string{"strongest micro-batch", colorStrongest})
	if len(bx) > 0 {
		polylineStyle(b, a, bx, by, colorStrongest, `stroke-dasharray="5 3"`)
		entries = append(entries, [2]string{"its bound (dashed)", colorStrongest})
	}
	legend(b, a, entries, false)
	b.WriteString("</g>\n")
}

func gridPanel(b *strings.Builder, x, y, width int, grid []*WorkloadResult) {
	a := frame(b, x, y, width, "C: throughput over partitions × workers", "", "records/s")
	ymax := 1.0
	for _, w := range grid {
		for _, dc := range designColors {
			if d := dc.get(w); d != nil {
				ymax = math.Max(ymax, d.ThroughputRPS)
			}
		}
	}
	a.xmin, a.xmax, a.ymin, a.ymax = 0, float64(len(grid)), 0, ymax*1.3
	a.grid(b, nil, ticks(0, a.ymax), num, num)
	bw := a.w / float64(len(grid)) / 4
	var entries [][2]string
	for i, w := range grid {
		k := 0
		for _, dc := range designColors {
			d := dc.get(w)
			if d == nil {
				continue
			}
			x0 := a.px(float64(i)) + bw*(0.5+float64(k))
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x0, a.py(d.ThroughputRPS), bw*0.9, a.py(0)-a.py(d.ThroughputRPS), dc.color)
			if i == 0 {
				entries = append(entries, [2]string{dc.name, dc.color})
			}
			k++
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">P=%d W=%d</text>`+"\n", a.px(float64(i)+0.5), a.y0+a.h+14, w.Partitions, w.Workers)
		if c := w.VsStrongest; c != nil {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%.1f× strongest</text>`+"\n", a.px(float64(i)+0.5), a.y0+a.h+28, c.Throughput)
		}
	}
	legend(b, a, entries, false)
	b.WriteString("</g>\n")
}

// ticks returns about five round ticks in [lo, hi].
func ticks(lo, hi float64) []float64 {
	if hi <= lo {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

func durText(d time.Duration) string {
	return fmt.Sprintf("%.1fms", ms(d))
}
