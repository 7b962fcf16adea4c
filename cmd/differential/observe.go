package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/internal/metricshttp"
)

// serveMetrics listens on addr (so a bad or busy address fails the command
// at once) and serves /metrics and the probes until stop is called.
func serveMetrics(addr string, reg metrics.Registry, mo metricshttp.Options, health *metricshttp.Health, log *slog.Logger, listening func(string)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	if mo.BuildInfo == nil {
		mo.BuildInfo = buildInfo()
	}
	srv := &http.Server{
		Handler:           metricshttp.Mux(metricshttp.Handler(reg, mo), health),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	bound := ln.Addr().String()
	log.Info("serving /metrics, /healthz, /livez and /readyz", "addr", bound)
	if listening != nil {
		listening(bound)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// groupJoined reports whether the consumer group has been joined at least
// once, from sarama's group metrics in the shared registry (a successful
// SyncGroup completes a join); it stays true afterwards.
func groupJoined(reg metrics.Registry, group string) func() bool {
	var joined atomic.Bool
	count := func(name string) int64 {
		if c, ok := reg.Get(name).(metrics.Counter); ok {
			return c.Count()
		}
		return 0
	}
	return func() bool {
		if joined.Load() {
			return true
		}
		if count("consumer-group-sync-total-"+group) > count("consumer-group-sync-failed-"+group) {
			joined.Store(true)
		}
		return joined.Load()
	}
}

// buildInfo is the labels of differential_build_info: the version as
// `differential version` prints it, the VCS revision ("" when the build
// recorded none, "+dirty" for a modified tree) and the Go version.
func buildInfo() map[string]string {
	bi, _ := debug.ReadBuildInfo()
	version, revision := Version, ""
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if revision != "" && modified {
			revision += "+dirty"
		}
	}
	return map[string]string{"version": version, "revision": revision, "goversion": runtime.Version()}
}
