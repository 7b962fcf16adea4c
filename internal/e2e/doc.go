// Package e2e holds end-to-end tests that cross packages: the attribution
// chain on a broker (embedded by default, the real one when
// DIFFERENTIAL_TEST_BROKERS names it) with the Pebble store, killed and
// restarted. It has no non-test code.
package e2e
