package chain

// Stage is one event-type consumer of a chain: a name, a filter choosing the
// records it processes (the others it skips, which also completes them), and
// a processor.
type Stage struct {
	// Name identifies the stage in commit metadata, state and metrics. Unique
	// within a chain; stable across restarts (positions are stored by name).
	Name string
	// Filter reports whether the stage processes a valid event; nil accepts
	// every valid event. Invalid events (Event.Err != nil) are never passed
	// to Filter or Process.
	Filter func(ev *Event) bool
	// Processor handles accepted events. Required.
	Processor Processor
	// KeyConcurrency > 1 lets up to that many records of different keys be
	// processed at once within the stage; records of one key stay strictly in
	// offset order. 0 or 1 (the default) is strict partition order. Its
	// workers start as keys find none idle, so a stage whose records do
	// not wait runs on about as many as there are cores.
	KeyConcurrency int
	// Gate is the scope of the follower gate in front of this stage:
	// GatePartition (the default, also for "") or GateKey (DESIGN.md "The key-scoped
	// gate": wait per key for the leader's progress on the record's key).
	// Ignored for the first stage.
	Gate GateScope
	// Private lists key prefixes of state this stage alone reads and
	// writes: its deduplication memory, say, where an earlier or later
	// stage never looks. Their entries are evicted at this stage's own
	// watermark instead of the slowest stage's (DESIGN.md "Stage-private
	// state"): on a backlog, where followers run far behind the leader,
	// most of a leader's short-lived private entries then expire between
	// two checkpoints and are never written to the local store or the
	// changelog. Another stage's Get, Set, Delete or range read that
	// touches one of them fails with ErrPrivateKey. No two stages' prefixes
	// may overlap. Outputs are the same with or without it.
	Private []string
}
