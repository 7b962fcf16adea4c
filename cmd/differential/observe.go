package main

import (
	"context"
	"crypto/tls"
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

	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/internal/statequery"
)

// httpServer is what serveHTTP serves.
type httpServer struct {
	httpServing
	reg    metrics.Registry
	mo     metricshttp.Options
	health *metricshttp.Health
	view   *liveview.View // nil: no live view
	// state builds the /state/{key} handler for the bound address (nil:
	// no state queries).
	state func(bound string) http.Handler
}

// serveHTTP listens on the server's address (so a bad or busy address
// fails the command at once) and serves the live view, /metrics and the
// probes until stop is called.
func serveHTTP(s httpServer, log *slog.Logger, listening func(string)) (stop func(), err error) {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", s.addr, err)
	}
	if s.mo.BuildInfo == nil {
		s.mo.BuildInfo = buildInfo()
	}
	mux := metricshttp.Mux(metricshttp.Handler(s.reg, s.mo), s.health)
	if s.view != nil {
		metricshttp.MountLiveView(mux, s.view, s.guard)
	}
	bound := ln.Addr().String()
	if s.state != nil {
		mux.Handle("GET "+statequery.Path, s.guard.Wrap(s.state(bound)))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: s.tls}
	scheme := "http"
	if s.tls != nil {
		ln, scheme = tls.NewListener(ln, s.tls), "https"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	}()
	// internal/chaos reads the address from this line ("serving /metrics
	// and /healthz", addr).
	log.Info("serving /metrics and /healthz, /livez, /readyz and the live view at /", "addr", bound, "url", scheme+"://"+bound+"/",
		"live_view_auth", s.guard.String())
	if s.view != nil && !s.guard.Enabled() && !loopback(bound) {
		what := "the live view is"
		if s.state != nil {
			what = "the live view and state queries are"
		}
		log.Warn(what + " open to every machine that reaches " + bound + ": set --http-token or --http-tls-client-ca-file, or serve on 127.0.0.1")
	}
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
