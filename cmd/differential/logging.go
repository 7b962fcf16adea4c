package main

import (
	"io"
	"log/slog"
)

var logLevels = []string{"debug", "info", "warn", "error"}

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
