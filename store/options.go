package store

import (
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Option configures [OpenPebble].
type Option interface{ apply(*config) }

type config struct {
	cacheBytes int64
	logger     *slog.Logger
	fs         vfs.FS
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithLogger sends Pebble's log lines to l, with the attribute
// component=pebble; Pebble's Fatalf logs at error level and then panics.
// Default: they are discarded.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithFS makes Pebble use fs, e.g. vfs.NewMem() in tests. Default: the
// operating system's file system (vfs.Default).
func WithFS(fs vfs.FS) Option {
	return optionFunc(func(c *config) { c.fs = fs })
}

// WithStateCacheBytes bounds the memory of the in-memory copies of the
// partitions' persisted state (all partitions of the DB together): a
// partition whose state fits in what is left is read from memory, the others
// from Pebble (same results, another CPU cost). 0 or less: none is kept.
// Default: DefaultStateCacheBytes (none).
func WithStateCacheBytes(n int64) Option {
	return optionFunc(func(c *config) { c.cacheBytes = n })
}
