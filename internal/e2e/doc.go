// Package e2e holds end-to-end tests that cross packages: the attribution
// chain on a broker (embedded by default, the real one when
// DIFFERENTIAL_TEST_BROKERS names it) with the Pebble store, killed and
// restarted, and fleets of `differential run` processes, in at-least-once
// mode (repeats only byte-identical) and exactly-once mode (a read_committed
// reader sees every output once: TestExactlyOnceSIGKILLRestart,
// TestExactlyOnceFleet), static members restarted without a rebalance
// (TestStaticMemberRestartMovesNothing, real broker), and the fleet
// benchmark of failover gaps (TestFleetFailoverGap, opt-in) and of
// start-up and rebalance times and of a running partition's CPU by
// partition count (TestPartitionScale, TestPartitionSteadyCPU; opt-in). It
// has no non-test code.
package e2e
