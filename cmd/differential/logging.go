package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

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
// so a rebalance, a commit error and a dead-lettered record each log one line.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated by the flag
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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
