package chain

import "time"

// Observer receives engine events; implementations must be fast and safe for
// concurrent use. Used by tests to check invariants at every step.
type Observer interface {
	// Begin is called when a stage begins (processes or skips) a record,
	// after the gate let it through.
	Begin(BeginInfo)
	// Advanced is called when a stage's position moves to next (watermark wm).
	Advanced(topic string, partition int32, stage int, next int64, wm time.Time)
	// Committed is called after Kafka acknowledged a commit.
	Committed(topic string, partition int32, offset int64, metadata string)
}

// BeginInfo describes one record a stage begins, with the leader's published
// checkpoint that released it: the last one the gate loaded, which may be
// older than the leader's checkpoint at that instant (positions and
// watermarks only grow, so an older one that lets the record through means
// the current one does too).
type BeginInfo struct {
	Topic      string
	Partition  int32
	Stage      int
	Offset     int64
	EventTime  time.Time
	Processing bool // the stage processes it (false: skips it)
	// LeaderNext is -1 for the first stage.
	LeaderNext      int64
	LeaderWatermark time.Time
	// Idle: the gate released it because the leader was idle.
	Idle bool
	// KeyScope: the stage's gate is key-scoped (GateKey). LeaderNext and
	// LeaderWatermark are then the leader's progress on the record's key:
	// every record of that key below LeaderNext was complete, and
	// LeaderWatermark is the stream time S(LeaderNext). The partition rule's
	// checks (LeaderNext > Offset + OffsetDistance, LeaderWatermark >
	// EventTime + Lateness) then read per key.
	KeyScope bool
}

// CompletionObserver is an Observer that is also told of every record a
// stage completes, before the completion is visible to any other stage (so
// an invariant checker has always heard of a leader's completion before
// the follower it releases begins). It costs a call per record and stage;
// meant for tests.
type CompletionObserver interface {
	Observer
	Completed(topic string, partition int32, stage int, offset int64)
}

// completions returns the observers among obs that are CompletionObservers,
// combined (nil if none).
func completions(obs []Observer) CompletionObserver {
	var cs completionFanout
	for _, o := range obs {
		if c, ok := o.(CompletionObserver); ok {
			cs = append(cs, c)
		}
	}
	switch len(cs) {
	case 0:
		return nil
	case 1:
		return cs[0]
	}
	return cs
}

type completionFanout []CompletionObserver

func (f completionFanout) Begin(b BeginInfo) {}

func (f completionFanout) Advanced(string, int32, int, int64, time.Time) {}

func (f completionFanout) Committed(string, int32, int64, string) {}

func (f completionFanout) Completed(topic string, partition int32, stage int, offset int64) {
	for _, o := range f {
		o.Completed(topic, partition, stage, offset)
	}
}

// PartitionObserver is an Observer that is also told when a partition starts
// and stops running (e.g. to register per-partition metrics, as
// chain/chainmetrics does). PartitionStarted runs once the partition's
// stages exist; stats returns the partition's current snapshot (as
// Chain.Stats) and may be called until PartitionStopped, which runs when
// RunPartition returns.
type PartitionObserver interface {
	Observer
	PartitionStarted(topic string, partition int32, stats func() PartitionStats)
	PartitionStopped(topic string, partition int32)
}

// RestoreObserver is an Observer that is also told when a partition's state
// restore starts (chains with a changelog), before its stages exist — e.g. to
// register restore metrics, as chain/chainmetrics does. stats returns the
// partition's current snapshot (its Restore field shows the progress) and
// may be called until RestoreStopped, which runs when RunPartition returns.
type RestoreObserver interface {
	Observer
	RestoreStarted(topic string, partition int32, stats func() PartitionStats)
	RestoreStopped(topic string, partition int32)
}

// fanout calls every observer of a chain, in order.
type fanout []Observer

// combine returns nil for no observer, the observer itself for one, and a
// fanout for several.
func combine(obs []Observer) Observer {
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return obs[0]
	}
	return fanout(obs)
}

func (f fanout) Begin(b BeginInfo) {
	for _, o := range f {
		o.Begin(b)
	}
}

func (f fanout) Advanced(topic string, partition int32, stage int, next int64, wm time.Time) {
	for _, o := range f {
		o.Advanced(topic, partition, stage, next, wm)
	}
}

func (f fanout) Committed(topic string, partition int32, offset int64, metadata string) {
	for _, o := range f {
		o.Committed(topic, partition, offset, metadata)
	}
}

func (f fanout) PartitionStarted(topic string, partition int32, stats func() PartitionStats) {
	for _, o := range f {
		if po, ok := o.(PartitionObserver); ok {
			po.PartitionStarted(topic, partition, stats)
		}
	}
}

func (f fanout) PartitionStopped(topic string, partition int32) {
	for _, o := range f {
		if po, ok := o.(PartitionObserver); ok {
			po.PartitionStopped(topic, partition)
		}
	}
}

func (f fanout) RestoreStarted(topic string, partition int32, stats func() PartitionStats) {
	for _, o := range f {
		if ro, ok := o.(RestoreObserver); ok {
			ro.RestoreStarted(topic, partition, stats)
		}
	}
}

func (f fanout) RestoreStopped(topic string, partition int32) {
	for _, o := range f {
		if ro, ok := o.(RestoreObserver); ok {
			ro.RestoreStopped(topic, partition)
		}
	}
}
