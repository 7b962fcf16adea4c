// Package e2e holds end-to-end tests that cross packages: the attribution
// chain on a broker (embedded by default, the real one when
// DIFFERENTIAL_TEST_BROKERS names it) with the Pebble store, killed and
// restarted, and fleets of `differential run` processes, in at-least-once
// mode (repeats only byte-identical) and exactly-once mode (a read_committed
// reader sees every output once: TestExactlyOnceSIGKILLRestart,
// TestExactlyOnceFleet). It has no non-test code.
package e2e
