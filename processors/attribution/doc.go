// Package attribution is the click → install → purchase attribution chain
// of DESIGN §5: a Decoder that validates the JSON events, and three stages
// (Chain) whose processors match installs to clicks and purchases to
// installs within one partition; and, with Config.Velocity, a fourth stage
// between click and install that alerts on click spam (VelocityProcessor).
// NewChain (NewChainWith for key concurrency, wrapped stages and the alerts
// topic) builds the *chain.Chain wired the way the rules need: the follower
// gate's lateness is Config.Lateness.
//
// # Rules (DESIGN §5, record for record)
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
// (DESIGN §5's field order; times in TimeFormat, RFC 3339 UTC with nine
// fractional digits; revenue copied verbatim from the input), one header
// SourceHeader = "<partition>/<offset>" of the input record, written by
// SourceValue and read by ParseSource (the only parser of it).
//
// # State layout
//
//	c/<user_id>#<bucket>      clicks of the user whose time falls in the bucket
//	                          (bucket = time / (Lookback/8), 8 bytes big-endian),
//	                          in offset order, after a header holding the last
//	                          offset appended: offset, time, arrival, event_id,
//	                          campaign_id, channel
//	                          expiry = bucket end + Lookback + Lateness
//	i/<user_id>               installs of the user, in offset order:
//	                          offset, time, event_id, campaign_id (empty if organic)
//	                          expiry = latest install time + InstallRetention
//	d/<type>/<event_id>       latest time of the non-duplicate records with that id
//	                          expiry = that time + DedupHorizon
//
// and, with the velocity stage:
//
//	v/d/<event_id>            as d/click/<event_id>, for the velocity stage's own dedup
//	v/a/<user_id>             the user's last alert: arrival watermark, offset
//	                          expiry = that arrival + Window − 1ns
//	w/velocity/<user_id>      the user's click counts (processors/window):
//	                          at most (Window+Lateness)/Bucket + 1 buckets
//	                          expiry = newest bucket + Window + Lateness − 1ns
//
// Values start with a version byte (1) and use varints; times are Unix
// nanoseconds (the Decoder only accepts times strictly between MinTime and
// MaxTime). Each key has a single writer: c/ the click stage, i/ the install
// stage, d/<type>/ the Sequence of that type's stage, v/ and w/velocity/ the
// velocity stage, so key-parallel
// processing (per Kafka key = user_id, which the Decoder enforces) never
// races on a read-modify-write. The purchase stage only reads.
//
// # Eviction and what it guarantees
//
// An entry's expiry is the last stream time at which a rule can still use
// it: the engine must delete it only once the slowest stage's watermark is
// strictly greater (it passes watermark − 1ns as evictBefore and deletes
// expiry ≤ evictBefore). Storing a click appends it to its bucket without
// decoding the bucket (the cost does not grow with a busy user's history; an
// install reads the at most 9 buckets its lookback covers), and whole
// buckets expire. The install stage drops, on every write, list entries
// that are unusable at Context.EvictionWatermark() (EvictionWatermark − time
// > InstallRetention). Neither stores a new entry that is already unusable. Every record a stage
// will still process has S(o) ≥ EvictionWatermark, and each rule's window
// condition is monotone in S, so eviction and trimming never change an
// output; the state of a user is bounded by the clicks/installs within one
// window. What remains usable at the partition's final stream time is
// exactly reference.Run's Final snapshot (compare with SnapshotOf +
// reference.Usable).
//
// Candidate clicks at offsets > o exist because the click stage runs ahead
// of the install stage; the engine's strict gate wm(click) > t+Lateness
// guarantees every click with A ≤ t+Lateness is stored when the install is
// processed, and the rule ignores stored clicks with A > t+Lateness, so the
// result does not depend on how far ahead the click stage is (except under
// idle release, DESIGN §5).
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
