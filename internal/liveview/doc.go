// Package liveview is a running engine's live view: one self-contained
// HTML page (inline CSS and JavaScript, no external asset, so it works
// offline) that polls a JSON snapshot every second and draws, per
// partition and stage, the position, the lag, the distance to the leader
// stage, buffered or polling mode, the rate, gate waits and idle releases,
// the restore's progress, the exactly-once cycles and the health check's
// verdict.
//
// The snapshot (Snapshot, served at APIPath) is built on each request from
// the same data as /metrics and /healthz: the chain's Stats, the health
// check, and a TxnTracker (a chain.TxnObserver) for the exactly-once
// cycles. A stage's rate is how fast its position moved over the last few
// seconds, from samples the View keeps of its own snapshots (at most one
// a second, for rateWindow), so it is there from a request half a second
// after the first on.
//
// What it owns: the samples (a mutex-guarded slice) and the TxnTracker's
// counts. The View does not serve on its own: the HTTP server mounts
// PageHandler and APIHandler (internal/metricshttp.MountLiveView), behind
// its authentication (internal/httpauth). A View and a TxnTracker are safe
// for concurrent use.
package liveview
