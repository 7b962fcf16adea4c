// Package attribution is the click → install → purchase attribution chain
// of DESIGN.md "Attribution rules": a Decoder that validates the JSON events, and three stages
// (Chain) whose processors match installs to clicks and purchases to
// installs within one partition; and, with Config.Velocity, a fourth stage
// between click and install that alerts on click spam (VelocityProcessor).
// NewChain (NewChainWith for key concurrency, wrapped stages and the alerts
// topic) builds the *chain.Chain wired the way the rules need: the follower
// gate's lateness is Config.Lateness.
//
// # Rules (DESIGN.md "Attribution rules", record for record)
//
// S(o) is the largest event time among valid records at offsets < o
// (Context.StreamTime); a click's arrival watermark is A = max(S(o), t).
//
//   - Duplicates (Sequence, every stage): a record is a duplicate when an
//     earlier non-duplicate record with the same (type, event_id) has
//     S(o) − time ≤ DedupHorizon. Duplicates have no effect and no output.
//   - Click: stored, with its arrival watermark. No output.
//   - Install at (o, t): candidates are the user's non-duplicate clicks with
//     time ≤ t, t − time ≤ Lookback, max(S(o), t) − time ≤ Lookback+Lateness
//     and (offset < o or A ≤ t+Lateness). Winner: latest time, ties → larger
//     offset. Output attributed, or organic when there is no candidate.
//   - Purchase at (o, t): the user's non-duplicate install with the largest
//     offset < o among those with max(S(o), t) − time ≤ InstallRetention
//     ("latest" is read as latest in the log, i.e. largest offset, and the
//     retention condition filters before choosing). Output with that
//     install's id and campaign, or empty ones.
//   - Velocity (optional, Config.Velocity, stage StageVelocity): a
//     non-duplicate click c is counted unless S(o) − t > Velocity.Lateness;
//     count(c) = the user's counted clicks at offsets ≤ o whose time, in
//     Velocity.Bucket steps, is in the Window up to t's (processors/window);
//     c raises an alert when count(c) > Threshold and no earlier click of the
//     user raised one with A(c) − A(that click) < Window. Output: an alert
//     (AppendAlert) to the alerts topic.
//
// Output records: key = user_id, value = AppendInstall / AppendPurchase
// (DESIGN.md "Attribution rules" field order; times in TimeFormat, RFC 3339 UTC with nine
// fractional digits; revenue copied verbatim from the input), one header
// SourceHeader = "<partition>/<offset>" of the input record, written by
// SourceValue and read by ParseSource (the only parser of it).
//
// # State layout
//
// Layout 2: every click and every install has its own key, so
// that no record's cost grows with its user's history. <user> is the user
// id length-prefixed (uvarint length, then its bytes): one user's keys form
// a contiguous range no other user's keys enter; <time> and <offset> are 8
// bytes big-endian (time in Unix nanoseconds), so each range is sorted.
//
//	c/<user><time><offset>    one stored click: arrival, event_id, campaign_id, channel
//	                          expiry = time + Lookback + Lateness
//	i/<user><offset>          one stored install: time, max time (the latest time of
//	                          the user's stored installs at offsets up to this one),
//	                          event_id, campaign_id (empty if organic)
//	                          expiry = time + InstallRetention
//	d/<type>/<event_id>       latest time of the non-duplicate records with that id
//	                          expiry = that time + DedupHorizon; private to the stage
//	                          of <type> (chain.Stage.Private)
//
// and, with the velocity stage, all private to it:
//
//	v/d/<event_id>            as d/click/<event_id>, for the velocity stage's own dedup
//	v/a/<user_id>             the user's last alert: arrival watermark, offset
//	                          expiry = that arrival + Window − 1ns
//	w/velocity/<user_id>      the user's click counts (processors/window):
//	                          at most (Window+Lateness)/Bucket + 1 buckets
//	                          expiry = newest bucket + Window + Lateness − 1ns
//
// Values start with a version byte (clicks and installs 2, seen values and
// the velocity stage's values 1, unchanged since layout 1) and use varints;
// times are Unix nanoseconds (the Decoder only accepts times strictly
// between MinTime and MaxTime). Layout 1 (one click list per user and time
// bucket, one install list per user) is not migrated: the store's format
// version changed with it, and store.OpenPebble refuses a database of the
// old format (store doc.go); a changelog written with layout 1 is not
// migrated either (its click and install values have version 1, which
// layout 2 refuses as corrupt): delete the changelog topic and the state
// directory and let the job rebuild its state from the input.
//
// What each record costs, whatever its user's history:
//
//   - click: one write, no read.
//   - install: one reverse scan of the user's clicks from its time t down to
//     max(t − Lookback, max(S(o), t) − Lookback − Lateness), which stops at
//     the first candidate: in (time, offset) order that is the winner. It
//     passes only clicks that sort above the winner but are not candidates
//     (stored ahead of the install, arrived after t+Lateness: late clicks
//     of the same user within its lookback). Then one reverse step for the
//     latest install below o (its max time) and one write.
//   - purchase: one reverse scan of the user's installs from o down, which
//     stops at the first usable install, or as soon as an install's max
//     time is unusable (nothing below it is usable). With a user's
//     installs in time order in the log this is one step; otherwise it
//     passes only installs that are unusable while one earlier in the log
//     is still usable (a later install with an older time, at the edge of
//     the retention).
//   - velocity: the user's bucketed counts (bounded by the window, not by
//     the history) and its last alert.
//   - every record: one read and one write of its d/ key (Sequence).
//
// A checkpoint's changelog records are the keys it wrote, so with one key
// per click and per install a record adds one changelog record whatever
// its user's history (layout 1 rewrote the user's whole list).
//
// Each key has a single writer: c/ the click stage, i/ the install stage,
// d/<type>/ the Sequence of that type's stage, v/ and w/velocity/ the
// velocity stage, so key-parallel processing (per Kafka key = user_id,
// which the Decoder enforces) never races on a read-modify-write. The
// purchase stage only reads.
//
// # Eviction and what it guarantees
//
// An entry's expiry is the last stream time at which a rule can still use
// it: the engine must delete it only once the slowest stage's watermark is
// strictly greater (it passes watermark − 1ns as evictBefore and deletes
// expiry ≤ evictBefore), one entry at a time through the store's expiry
// index, in bounded batches. Neither stage stores an entry that is already
// unusable: a click unusable at Context.EvictionWatermark() (every record a
// stage will still process has S(o) ≥ it), an install unusable at its own
// S(o) (purchases use only installs below their offset, so their S is at
// least that). Each rule's window condition is monotone in S, so eviction
// never changes an output; the state of a user is bounded by the clicks and
// installs within one window. What remains usable at the partition's final
// stream time is exactly reference.Run's Final snapshot (compare with
// SnapshotOf + reference.Usable).
//
// Candidate clicks at offsets > o exist because the click stage runs ahead
// of the install stage; the engine's strict gate wm(click) > t+Lateness
// guarantees every click with A ≤ t+Lateness is stored when the install is
// processed, and the rule ignores stored clicks with A > t+Lateness, so the
// result does not depend on how far ahead the click stage is. Where the log
// shows the click stage idle between the install and the position that
// guarantee needs (a gap in the Kafka timestamps longer than the idle
// timeout), the install may run before the clicks after the gap; it then
// also ignores every click at an offset ≥ chain.Context.Horizon (the offset
// past the gap), so that case, too, gives the same result on every replay.
//
// # Gate scope
//
// The install and purchase stages use the key-scoped gate (chain.GateKey;
// Wiring.Gate = chain.GatePartition selects the partition gate): an install
// of user u waits only until the click stage has completed u's clicks at
// offsets ≤ o + OffsetDistance and below q(t+Lateness), the first offset
// whose stream time exceeds t+Lateness — exactly the clicks the rule can
// use, since a click at or after q has A ≥ S(q) > t+Lateness; a purchase
// likewise waits only for u's installs. Every other read of the processors
// is of the record's own user's keys, or (Sequence) of its own stage's
// dedup entries in offset order, and eviction only drops what no rule can
// use at the slowest stage's watermark, so the outputs equal the
// partition gate's record for record (TestKeyScopeEqualsPartitionScopeAndModel);
// only the order of different users' outputs of a stage changes.
//
// Errors: a payload that is not *Event (wrong Decoder) and corrupt state
// values are Fatal; state errors are retried in Process and Fatal in
// Sequence (whose errors the engine dead-letters without retry).
package attribution
