package chain

import "fmt"

// GateScope says what a follower stage waits for before it begins a record
// (DESIGN.md "The key-scoped gate"). Set it per stage (Stage.Gate); it has no effect
// on the first stage, which has no leader.
type GateScope string

const (
	// GatePartition (the default; "" means the same): the follower begins
	// offset o with event time t only when its leader's position is
	// > o + OffsetDistance and, for records it processes, the leader's
	// watermark is > t + Lateness. One slow record of the leader holds back
	// every record of the partition behind it.
	GatePartition GateScope = "partition"
	// GateKey: the same rule per key. The follower begins (o, t, key k) when
	// its leader has completed (a′) every record of k at offsets
	// ≤ o + OffsetDistance and, for records it processes, (b′) every record
	// of k at offsets below q(t + Lateness), the first offset whose stream
	// time exceeds t + Lateness — or when the leader is idle. Records of
	// other keys do not wait for k. For processors that read and write only
	// their record's key's state (the attribution processors: key =
	// user_id) and whose Sequence, if any, reads only the stage's own
	// state: the outputs equal those under GatePartition.
	//
	// The stage still reads, decodes, sequences (Sequencer) and computes
	// stream time in offset order; records then wait per key in a queue
	// bounded by the in-flight window (WithInFlight) and run in offset
	// order within a key. Positions stay contiguous prefixes and commits
	// are unchanged. A stop lets the records waiting in the gate finish
	// (their leaders' records are already begun and finish too), so a clean
	// stop repeats nothing.
	GateKey GateScope = "key"
)

// ParseGateScope parses "partition" or "key" (the empty string is the
// default, partition).
func ParseGateScope(s string) (GateScope, error) {
	switch GateScope(s) {
	case "", GatePartition:
		return GatePartition, nil
	case GateKey:
		return GateKey, nil
	}
	return "", fmt.Errorf("gate scope must be %q or %q, got %q", GatePartition, GateKey, s)
}

func (g GateScope) String() string {
	if g == "" {
		return string(GatePartition)
	}
	return string(g)
}
