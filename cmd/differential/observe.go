package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/internal/metricshttp"
)

// serveMetrics listens on addr (so a bad or busy address fails the command
// at once) and serves /metrics and /healthz until stop is called.
func serveMetrics(addr string, reg metrics.Registry, health *metricshttp.Health, log *slog.Logger, listening func(string)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           metricshttp.Mux(metricshttp.Handler(reg), health),
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
	log.Info("serving /metrics and /healthz", "addr", bound)
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
