// Package chaos is the fault-injection suite: it runs the attribution job
// as real `differential run` processes on a real 3-node Kafka cluster
// (scripts/kafka.sh), streams a seeded workload in while it injects the
// faults Kafka's own system tests use — a partition leader SIGKILLed, the
// group coordinator paused past the session timeout, a rolling restart, an
// output leader killed with outputs in flight, a broker and the engine
// killed together — and then checks every output and dead letter, read
// back read_committed, against the reference model.
//
// What a passing scenario guarantees: the input topic holds exactly the
// workload; every output and dead letter the model prescribes was written,
// with the model's key and value, and nothing else; one key's outputs of a
// stage are in input offset order (the key-scoped gate orders per key);
// repeats are byte-identical copies
// (AtLeastOnce) or absent (ExactlyOnce); the engine stopped cleanly (exit 0
// after SIGTERM) with /healthz answering 200; and, for a scenario that
// stops a partition past the stall timeout (Scenario.ExpectStall: the
// input leader killed, the coordinator paused, the output leader killed),
// /healthz answered "503 stalled" after the first fault. It reports per scenario the
// records in, outputs, repeats, dead letters, the time from each fault to
// the group's lag back at zero, and what /healthz said meanwhile (Table).
//
// Timing-independence: outputs depend on timing only through idle release
// (DESIGN.md "Mechanisms"), so the engine runs with an IdleTimeout above every stall a
// schedule injects, each partition's input ends with a marker click that
// releases the tail by the gate's own rule (endMarkers), and the results
// report the idle releases /metrics counted (0 in a valid run).
//
// The suite is Go tests behind DIFFERENTIAL_CHAOS=1 (chaos_test.go). Faults
// act only on the processes scripts/kafka.sh recorded and the engines the
// suite started. A Run is driven by one goroutine (its Faults schedule);
// its samplers run on their own goroutines until the run ends.
package chaos
