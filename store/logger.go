package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// slogLogger implements pebble.Logger over a *slog.Logger.
type slogLogger struct{ l *slog.Logger }

var _ pebble.Logger = slogLogger{}

func (s slogLogger) Infof(format string, args ...any) { s.logf(slog.LevelInfo, format, args) }

func (s slogLogger) Errorf(format string, args ...any) { s.logf(slog.LevelError, format, args) }

// Fatalf logs at error level and panics: Pebble calls it on unrecoverable
// conditions (e.g. corruption) and relies on it not returning. A library
// must not exit the process; the panic carries the message.
func (s slogLogger) Fatalf(format string, args ...any) {
	msg := strings.TrimSuffix(fmt.Sprintf(format, args...), "\n")
	s.l.Error(msg, "fatal", true)
	panic("store: pebble fatal: " + msg)
}

func (s slogLogger) logf(level slog.Level, format string, args []any) {
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, strings.TrimSuffix(fmt.Sprintf(format, args...), "\n"))
}
