package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

var logLevels = []string{"debug", "info", "warn", "error"}

// registerLogFlags registers --log-format (text or json) and --log-level
// (one of logLevels) on fs; format and level hold their defaults.
func registerLogFlags(fs *flag.FlagSet, format, level *string, levelHelp string) {
	fs.Var(enumValue{format, []string{"text", "json"}}, "log-format", "log format on stderr: `text|json`")
	fs.Var(enumValue{level, logLevels}, "log-level", levelHelp)
}

// newLogger returns the process's structured logger: text or JSON lines on w
// at the given level. Every component gets it (engine, Kafka adapter, store),
// so a rebalance and a commit error each log one line; dead-lettered
// records are sampled (deadLetterSampler). flushLog reports the dead
// letters sampled and not yet reported when the command ends.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated by the flag
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(newDeadLetterSampler(h, deadLetterInterval))
}

// flushLog reports the dead letters log has counted and not reported yet.
func flushLog(log *slog.Logger) {
	if h, ok := log.Handler().(*deadLetterSampler); ok {
		h.s.flush()
	}
}

// saramaLog receives sarama's package-level client log at debug level while
// a command runs with --log-level debug (nil: discarded). sarama reads its
// Logger variable from its own goroutines without synchronisation, so the
// variable is set once, at init, before any client exists, and only this
// pointer changes afterwards.
var saramaLog atomic.Pointer[slog.Logger]

func init() { sarama.Logger = saramaLogger{} }

// saramaLogger is the sarama.StdLogger that forwards to saramaLog.
type saramaLogger struct{}

func (saramaLogger) Print(v ...any)                 { saramaDebug(fmt.Sprint(v...)) }
func (saramaLogger) Printf(format string, v ...any) { saramaDebug(fmt.Sprintf(format, v...)) }
func (saramaLogger) Println(v ...any)               { saramaDebug(fmt.Sprintln(v...)) }

func saramaDebug(msg string) {
	if l := saramaLog.Load(); l != nil {
		l.Debug(strings.TrimRight(msg, "\n"))
	}
}

// deadLetterMsg is the message of the chain's line about a dead-lettered
// record (chain/emit.go), with its "reason".
const deadLetterMsg = "record dead-lettered"

// Dead-letter logging is sampled: per reason, the first deadLettersInFull
// lines pass in full, and the others are counted and reported in one line
// per deadLetterInterval ("dead letters not logged one by one", with the
// count of each reason), so a stream of invalid records does not flood the
// log while every reason is still shown with its record once.
const (
	deadLettersInFull  = 3
	deadLetterInterval = time.Minute
)

// deadLetterSampler is the slog.Handler that samples the dead-letter lines
// of the handler it wraps and passes every other record through. The
// handlers WithAttrs and WithGroup return share its counts.
type deadLetterSampler struct {
	inner slog.Handler
	s     *dlSampling
}

// dlSampling is the state the sampler's handlers share.
type dlSampling struct {
	mu       sync.Mutex
	seen     map[string]int   // lines seen per reason class
	pending  map[string]int64 // lines not logged since the last report
	since    time.Time        // start of the interval pending covers
	timer    *time.Timer      // the report of pending, nil: none scheduled
	out      slog.Handler     // where the report goes
	interval time.Duration
	closed   bool
}

func newDeadLetterSampler(inner slog.Handler, interval time.Duration) *deadLetterSampler {
	return &deadLetterSampler{inner: inner, s: &dlSampling{seen: map[string]int{}, pending: map[string]int64{},
		out: inner, interval: interval}}
}

func (h *deadLetterSampler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *deadLetterSampler) WithAttrs(as []slog.Attr) slog.Handler {
	return &deadLetterSampler{inner: h.inner.WithAttrs(as), s: h.s}
}

func (h *deadLetterSampler) WithGroup(name string) slog.Handler {
	return &deadLetterSampler{inner: h.inner.WithGroup(name), s: h.s}
}

func (h *deadLetterSampler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != deadLetterMsg {
		return h.inner.Handle(ctx, r)
	}
	reason := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			reason = a.Value.String()
			return false
		}
		return true
	})
	class := reasonClass(reason)
	s := h.s
	s.mu.Lock()
	s.seen[class]++
	if s.seen[class] <= deadLettersInFull || s.closed {
		s.mu.Unlock()
		return h.inner.Handle(ctx, r)
	}
	if len(s.pending) == 0 {
		s.since = time.Now()
	}
	s.pending[class]++
	if s.timer == nil {
		s.timer = time.AfterFunc(s.interval, s.report)
	}
	s.mu.Unlock()
	return nil
}

// report logs the counts of the dead letters not logged since the last
// report, one line, and starts a new interval.
func (s *dlSampling) report() {
	s.mu.Lock()
	s.timer = nil
	pending, since := s.pending, s.since
	s.pending = map[string]int64{}
	s.mu.Unlock()
	if len(pending) == 0 || !s.out.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	var total int64
	reasons := make([]any, 0, len(pending))
	for _, class := range slices.Sorted(maps.Keys(pending)) {
		total += pending[class]
		reasons = append(reasons, slog.Int64(class, pending[class]))
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "dead letters not logged one by one", 0)
	r.AddAttrs(slog.Int64("count", total), slog.Duration("interval", time.Since(since).Round(time.Millisecond)),
		slog.Group("by_reason", reasons...))
	_ = s.out.Handle(context.Background(), r)
}

// flush reports what is pending now and logs every later dead letter in
// full (the command is ending: no report would follow).
func (s *dlSampling) flush() {
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.closed = true
	s.mu.Unlock()
	s.report()
}

// reasonClass is a dead letter's reason without its particulars: quoted
// values become "…" and words with digits (offsets, sizes, times,
// durations) #, so "value is 65537 bytes, more than MaxRecordBytes
// (65536)" and its like count as one reason.
func reasonClass(reason string) string {
	var b strings.Builder
	for i := 0; i < len(reason); {
		c := reason[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(reason) && reason[j] != '"' {
				if reason[j] == '\\' {
					j++
				}
				j++
			}
			b.WriteString(`"…"`)
			i = j + 1
		case isWordByte(c):
			j := i
			digits := false
			for j < len(reason) && isWordByte(reason[j]) {
				digits = digits || (reason[j] >= '0' && reason[j] <= '9')
				j++
			}
			if digits {
				b.WriteByte('#')
			} else {
				b.WriteString(reason[i:j])
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// isWordByte: a byte of a word as reasonClass reads them (times and
// durations are one word: 2026-09-01T04:03:50.05Z, 3h0m0.0009s).
func isWordByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c == ':' || c == '+' ||
		(c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
