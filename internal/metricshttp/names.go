package metricshttp

import (
	"strconv"
	"strings"
)

// label is one Prometheus label pair.
type label struct{ name, value string }

// series is where one registry metric goes: its family's base name, its
// labels, whether the value is monotone (exported as a counter), its HELP
// text, and the factor that turns the registry's unit into the exported
// base unit (1e-3 for milliseconds to seconds).
type series struct {
	base     string
	labels   []label
	monotone bool
	help     string
	scale    float64
}

const (
	stagePrefix     = "differential.stage."
	partitionPrefix = "differential.partition."
	txnPrefix       = "differential.txn."
	windowPrefix    = "differential.window."
	standbyPrefix   = "differential.standby."
)

// standbyHelp is the HELP text of the standby series.
var standbyHelp = map[string]string{
	"warm":    "Partitions this member holds warm for other members (standby replicas whose last catch-up succeeded).",
	"records": "Changelog records the member's standby replicas applied to its local state.",
	"errors":  "Standby catch-ups that failed (retried at the next round).",
}

// monotone lists the engine metrics that only grow during a partition's run
// (they restart at zero when the partition is assigned again, which
// Prometheus treats as a counter reset).
var monotone = map[string]bool{
	"commits": true, "commit_errors": true, "processed": true, "skipped": true,
	"dead_lettered": true, "retries": true, "idle_releases": true, "mode_switches": true,
	"restore_records": true, "restore_bytes": true,
}

// seriesOf maps a registry name to its exported family, labels and help.
// topics maps a topic name as sarama writes it into its per-topic metric
// names ('.' replaced by '_') back to the topic's real name.
func seriesOf(name string, topics map[string]string) series {
	s := seriesName(name, topics)
	if s.scale == 0 {
		s.scale = 1
	}
	s.base, s.scale = baseUnits(s.base, s.scale)
	return s
}

func seriesName(name string, topics map[string]string) series {
	switch {
	case strings.HasPrefix(name, stagePrefix):
		if s, ok := engineSeries(name[len(stagePrefix):], "differential_stage_", true); ok {
			return s
		}
	case strings.HasPrefix(name, partitionPrefix):
		if s, ok := engineSeries(name[len(partitionPrefix):], "differential_partition_", false); ok {
			return s
		}
	case strings.HasPrefix(name, txnPrefix):
		// The exactly-once series (chainmetrics, kafka.FencedMetric).
		rest := name[len(txnPrefix):]
		if cause, ok := strings.CutPrefix(rest, "aborted."); ok {
			return series{base: "differential_txn_aborted", labels: []label{{"cause", cause}}, monotone: true,
				help: engineHelp["differential_txn_aborted"]}
		}
		base := "differential_txn_" + sanitize(rest)
		return series{base: base, monotone: rest == "committed" || rest == "fenced", help: engineHelp[base]}
	case strings.HasPrefix(name, windowPrefix):
		// differential.window.<window>.<metric> (processors/window).
		rest := name[len(windowPrefix):]
		if i := strings.LastIndexByte(rest, '.'); i > 0 {
			metric := rest[i+1:]
			return series{base: "differential_window_" + sanitize(metric), labels: []label{{"window", rest[:i]}},
				monotone: metric == "counted" || metric == "late", help: windowHelp[metric]}
		}
	case strings.HasPrefix(name, standbyPrefix):
		// kafka's standby replicas (kafka.StandbyMetricPrefix).
		rest := name[len(standbyPrefix):]
		return series{base: "differential_standby_" + sanitize(rest), monotone: rest == "records" || rest == "errors",
			help: standbyHelp[rest]}
	case name == "differential.velocity.alerts":
		return series{base: "differential_velocity_alerts", monotone: true,
			help: "Click-velocity alerts the velocity stage emitted."}
	}
	if strings.HasPrefix(name, "differential.") {
		return series{base: sanitize(name)}
	}
	return saramaSeries(name, topics)
}

// baseUnits renames a family in milliseconds to one in seconds:
// <x>_unix_ms becomes <x>_timestamp_seconds, <x>_ms and <x>_in_ms
// <x>_seconds, and the value is scaled.
func baseUnits(base string, scale float64) (string, float64) {
	if b, ok := strings.CutSuffix(base, "_unix_ms"); ok {
		return b + "_timestamp_seconds", scale * 1e-3
	}
	for _, suffix := range []string{"_in_ms", "_ms"} {
		if b, ok := strings.CutSuffix(base, suffix); ok {
			return b + "_seconds", scale * 1e-3
		}
	}
	return base, scale
}

// engineSeries parses "<topic>.<partition>[.<stage>].<metric>" from the right.
func engineSeries(rest, prefix string, withStage bool) (series, bool) {
	parts := strings.Split(rest, ".")
	n := len(parts)
	min, pi := 3, n-2
	if withStage {
		min, pi = 4, n-3
	}
	if n < min {
		return series{}, false
	}
	if _, err := strconv.ParseInt(parts[pi], 10, 32); err != nil {
		return series{}, false
	}
	metric := parts[n-1]
	s := series{
		base:     prefix + sanitize(metric),
		labels:   []label{{"topic", strings.Join(parts[:pi], ".")}, {"partition", parts[pi]}},
		monotone: monotone[metric],
		help:     engineHelp[metric],
	}
	if withStage {
		s.labels = append(s.labels, label{"stage", parts[n-2]})
	}
	return s, true
}

// saramaGroupMetrics are sarama's consumer-group metrics, whose names end
// in "-<group id>": counters that only grow.
var saramaGroupMetrics = []string{
	"consumer-group-join-total-", "consumer-group-join-failed-",
	"consumer-group-sync-total-", "consumer-group-sync-failed-",
}

// saramaMetric is how one of sarama's metrics (by its name without the
// per-broker or per-topic suffix) is exported: its family's base name and
// HELP text (from sarama's documentation, sarama.go).
type saramaMetric struct{ base, help string }

// saramaScale turns a sarama metric's unit into the exported one: sarama
// records compression ratios times 100.
var saramaScale = map[string]float64{"compression-ratio": 0.01}

var saramaMetrics = map[string]saramaMetric{
	"incoming-byte-rate":           {"incoming_bytes", "Bytes read from the brokers."},
	"outgoing-byte-rate":           {"outgoing_bytes", "Bytes written to the brokers."},
	"request-rate":                 {"requests", "Requests sent to the brokers."},
	"request-size":                 {"request_size_bytes", "Size of the requests sent to the brokers, bytes."},
	"request-latency-in-ms":        {"request_latency_in_ms", "Latency of the requests to the brokers, seconds."},
	"response-rate":                {"responses", "Responses received from the brokers."},
	"response-size":                {"response_size_bytes", "Size of the responses received from the brokers, bytes."},
	"requests-in-flight":           {"requests_in_flight", "Requests sent and awaiting a response."},
	"protocol-requests-rate":       {"protocol_requests", "Requests sent to the brokers, by Kafka protocol API key."},
	"batch-size":                   {"batch_size_bytes", "Bytes sent per partition per produce request, bytes."},
	"record-send-rate":             {"records_sent", "Records the producers sent."},
	"records-per-request":          {"records_per_request", "Records sent per produce request."},
	"compression-ratio":            {"compression_ratio", "Compression ratio of the record batches sent: uncompressed over compressed size."},
	"throttle-time-in-ms":          {"throttle_time_in_ms", "Time the brokers throttled a client, seconds."},
	"consumer-batch-size":          {"consumer_batch_size", "Records per fetched batch."},
	"consumer-fetch-rate":          {"consumer_fetches", "Fetch requests the consumers sent."},
	"consumer-fetch-response-size": {"consumer_fetch_response_size_bytes", "Size of the fetch responses, bytes."},
	"consumer-group-join-total":    {"consumer_group_join", "Consumer group join attempts."},
	"consumer-group-join-failed":   {"consumer_group_join_failed", "Consumer group join attempts that failed."},
	"consumer-group-sync-total":    {"consumer_group_sync", "Consumer group sync attempts."},
	"consumer-group-sync-failed":   {"consumer_group_sync_failed", "Consumer group sync attempts that failed."},
}

func saramaSeries(name string, topics map[string]string) series {
	for _, p := range saramaGroupMetrics {
		if g, ok := strings.CutPrefix(name, p); ok && g != "" {
			m := saramaMetrics[strings.TrimSuffix(p, "-")]
			return series{base: "sarama_" + m.base, labels: []label{{"group", g}}, monotone: true, help: m.help}
		}
	}
	var labels []label
	for _, v := range []struct{ sep, label string }{{"-for-broker-", "broker"}, {"-for-topic-", "topic"}} {
		if i := strings.LastIndex(name, v.sep); i > 0 && i+len(v.sep) < len(name) {
			value := name[i+len(v.sep):]
			if v.label == "topic" {
				if real, ok := topics[value]; ok {
					value = real
				}
			}
			labels = []label{{v.label, value}}
			name = name[:i]
			break
		}
	}
	if rest, ok := strings.CutPrefix(name, "protocol-requests-rate-"); ok {
		if _, err := strconv.Atoi(rest); err == nil {
			labels = append(labels, label{"api_key", rest})
			name = "protocol-requests-rate"
		}
	}
	if m, ok := saramaMetrics[name]; ok {
		return series{base: "sarama_" + m.base, labels: labels, help: m.help, scale: saramaScale[name]}
	}
	return series{base: "sarama_" + sanitize(name), labels: labels}
}

// sanitize turns s into a legal metric name: [a-zA-Z_:][a-zA-Z0-9_:]*, every
// other byte becomes '_'.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// topicNames maps every topic as sarama writes it in a per-topic metric's
// name ('.' as '_', cf. KAFKA-1902) to the topic. Kafka refuses to create
// a topic whose name collides with an existing one in this mapping, so
// within one cluster the mapping is one to one.
func topicNames(topics []string) map[string]string {
	m := make(map[string]string, len(topics))
	for _, t := range topics {
		if t != "" {
			m[strings.ReplaceAll(t, ".", "_")] = t
		}
	}
	return m
}
