package metricshttp

import (
	"net/http"

	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/internal/liveview"
)

// MountLiveView serves the live view on mux: its page at GET / (the root
// only) and its JSON at GET liveview.APIPath, both behind guard (a nil or
// open Guard lets everything through). /metrics and /healthz, which Mux
// serves, are not guarded: a scraper and a probe need no credentials.
func MountLiveView(mux *http.ServeMux, v *liveview.View, guard *httpauth.Guard) {
	mux.Handle("GET /{$}", guard.Wrap(v.PageHandler()))
	mux.Handle("GET "+liveview.APIPath, guard.Wrap(v.APIHandler()))
}
