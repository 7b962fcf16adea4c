package main

import (
	"testing"
)

// TestRunGateScopes runs `run` with key-parallel stages under each gate
// scope on its own topics (the embedded broker, or a real one with
// DIFFERENTIAL_TEST_BROKERS) to the end of a produced workload: the
// outputs and dead letters must equal the reference model's, record for
// record, with no duplicate and one user's outputs in offset order. (The
// default scope, key, also runs in TestProduceRunStopRestart and the
// other run tests.)
func TestRunGateScopes(t *testing.T) {
	for _, gate := range []string{"key", "partition"} {
		t.Run(gate, func(t *testing.T) {
			tp := newTopics(t, 3)
			tp.produce(t, 4000, 11)
			tp.runToEnd(t, "--gate", gate, "--key-concurrency", "8")
			r := tp.verifyOutputs(t)
			t.Logf("%s gate: %d installs, %d purchases, %d dead letters", gate, r.Installs.Matched, r.Purchases.Matched, r.DeadLetters.Matched)
		})
	}
}
