// Package metricshttp serves a process's go-metrics registry to Prometheus
// through Prometheus' own client library, and a health check derived from
// the engine's Stats (Health: "stalled" when, past the stall timeout, a
// lagging stage does not move, a partition's leader does not answer, or a
// commit is not acknowledged; an idle partition is none of these), with the
// two probes Kubernetes asks for: Health.Live (/livez: 503 only when the
// engine has exited or its Stats do not answer, so a broker outage
// restarts nothing) and Health.Ready (/readyz: 503 before the join, with
// no partition, during a restore, or while anything is stalled).
//
// Collector is a prometheus.Collector over the go-metrics registry; Handler
// serves it with promhttp beside client_golang's Go runtime (go_*) and
// process (process_*) collectors, in the format the scraper negotiates (the
// text format 0.0.4 by default), gzipped when asked.
//
// What it owns: nothing long-lived. The Collector reads the registry on
// every scrape (go-metrics registries are safe for concurrent use; the
// engine's gauges are functional gauges over atomics), and Health reads the
// Stats function it is given on every request (Live at most one call at a
// time: a call that does not return is waited for, not repeated). Both are
// safe for concurrent use.
//
// # Names
//
// The engine names its gauges differential.stage.<topic>.<partition>.<stage>.<metric>
// and differential.partition.<topic>.<partition>.<metric> (chain/stats.go). They
// are exported as differential_stage_<metric>{topic,partition,stage} and
// differential_partition_<metric>{topic,partition}. The name is split from
// the right: the metric and the stage are one dot-free component each and
// the partition is an integer, so topics may contain dots (Kafka allows
// them) but stage names must not (the attribution stages' do not). The
// engine's monotone gauges (commits, processed, ...) are exported as
// counters with a _total suffix; the others as gauges. The exactly-once
// series differential.txn.* and the window counters'
// differential.window.<window>.<metric> (a window label) follow the same
// rules. Every family has a HELP text of its own (the tables in
// prometheus.go and names.go; a metric no table knows says which registry
// name it comes from).
//
// Units are Prometheus' base units: a registry name in milliseconds is
// exported in seconds, <x>_unix_ms as <x>_timestamp_seconds and <x>_ms or
// <x>_in_ms as <x>_seconds, its value scaled.
//
// Every other metric of the registry is sarama's (the registry is shared
// with the Kafka clients) and is exported as sarama_<name> under the same
// rules (a meter <x>-rate counts <x>, sarama_<x>_total; sizes are _bytes),
// with the per-broker, per-topic, per-group and per-API-key variants
// turned into labels: request-latency-in-ms-for-broker-1 becomes
// sarama_request_latency_seconds{broker="1"}. sarama writes a topic into a
// name with '.' as '_'; Options.Topics gives the topics whose real names
// the topic label carries.
//
// Options.Stats adds zero-valued series for the partitions that are
// assigned but have not started their stages (no record yet), and
// Options.BuildInfo differential_build_info. Lint checks an exposition
// against the naming rules.
//
// Types: a go-metrics Counter can go down (sarama's requests-in-flight), so
// it is a Prometheus gauge; a Meter is a counter <name>_total plus gauges
// <name>_rate1, _rate5, _rate15 and _rate_mean (per second); a Histogram is a
// summary (quantiles 0.5, 0.75, 0.95, 0.99, _sum, _count); a Timer is a
// summary in seconds (<name>_seconds) plus a <name>_rate1 gauge.
//
// A scrape never fails because of one metric: names that map onto an
// already exported series (after sanitizing) are dropped, first one wins in
// name order, so the output is always valid exposition. The engine's and
// sarama's families never collide with go_* and process_*.
package metricshttp
