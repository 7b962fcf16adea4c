package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
)

// progress shows the chain's per-stage progress, aggregated over the
// partitions: position (records completed), lag, rate and mode. On a
// terminal it redraws one block in place; otherwise it prints one line per
// call. The caller calls show about once a second.
type progress struct {
	w      io.Writer
	tty    bool
	stages []string
	start  time.Time

	prevAt  time.Time
	prevPos map[string]int64
	drawn   int // lines of the block on screen
}

func newProgress(w io.Writer, stages []string, start time.Time) *progress {
	return &progress{w: w, tty: isTerminal(w), stages: stages, start: start, prevAt: start, prevPos: map[string]int64{}}
}

// isTerminal reports whether w is a character device (and TERM is not dumb).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// stageLine is one stage's aggregate over the partitions.
type stageLine struct {
	name             string
	pos, lag         int64
	rate             float64
	polling, running int
}

func (p *progress) aggregate(stats []chain.PartitionStats, now time.Time) []stageLine {
	lines := make([]stageLine, len(p.stages))
	for i, n := range p.stages {
		lines[i].name = n
	}
	for _, ps := range stats {
		for i, s := range ps.Stages {
			if i >= len(lines) {
				break
			}
			l := &lines[i]
			l.pos += s.Position
			l.lag += max(s.Lag, 0)
			l.running++
			if s.Mode == "polling" {
				l.polling++
			}
		}
	}
	dt := now.Sub(p.prevAt).Seconds()
	for i := range lines {
		l := &lines[i]
		if dt > 0 {
			l.rate = float64(l.pos-p.prevPos[l.name]) / dt
		}
		p.prevPos[l.name] = l.pos
	}
	p.prevAt = now
	return lines
}

func (l stageLine) mode() string {
	switch {
	case l.running == 0:
		return "waiting"
	case l.polling == 0:
		return "buffered"
	}
	return fmt.Sprintf("polling %d/%d", l.polling, l.running)
}

// show prints the current progress.
func (p *progress) show(stats []chain.PartitionStats, now time.Time) {
	lines := p.aggregate(stats, now)
	elapsed := now.Sub(p.start).Round(100 * time.Millisecond)
	if !p.tty {
		parts := make([]string, len(lines))
		for i, l := range lines {
			parts[i] = fmt.Sprintf("%s pos %s lag %s rate %s/s %s", l.name, count(l.pos), count(l.lag), rate(l.rate), l.mode())
		}
		fmt.Fprintf(p.w, "[%6s] %d partitions | %s\n", elapsed, len(stats), strings.Join(parts, " | "))
		return
	}
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn) // back to the block's first line
	}
	row := func(format string, args ...any) {
		b.WriteString("\x1b[2K")
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	row("elapsed %s, %d partitions running", elapsed, len(stats))
	row("  %-10s %12s %12s %12s  %s", "stage", "position", "lag", "rate/s", "mode")
	for _, l := range lines {
		row("  %-10s %12s %12s %12s  %s", l.name, count(l.pos), count(l.lag), rate(l.rate), l.mode())
	}
	p.drawn = 2 + len(lines)
	_, _ = io.WriteString(p.w, b.String())
}
