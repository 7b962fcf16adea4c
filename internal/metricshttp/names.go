package metricshttp

import (
	"strconv"
	"strings"
)

// label is one Prometheus label pair.
type label struct{ name, value string }

// series is where one registry metric goes: its family's base name, its
// labels, and whether the engine's value is monotone (exported as a counter).
type series struct {
	base     string
	labels   []label
	monotone bool
}

const (
	stagePrefix     = "differential.stage."
	partitionPrefix = "differential.partition."
	txnPrefix       = "differential.txn."
)

// monotone lists the engine metrics that only grow during a partition's run
// (they restart at zero when the partition is assigned again, which
// Prometheus treats as a counter reset).
var monotone = map[string]bool{
	"commits": true, "commit_errors": true, "processed": true, "skipped": true,
	"dead_lettered": true, "retries": true, "idle_releases": true, "mode_switches": true,
	"restore_records": true, "restore_bytes": true,
}

// seriesOf maps a registry name to its exported family and labels.
func seriesOf(name string) series {
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
		// The exactly-once counters (chainmetrics, kafka.FencedMetric).
		rest := name[len(txnPrefix):]
		if cause, ok := strings.CutPrefix(rest, "aborted."); ok {
			return series{base: "differential_txn_aborted", labels: []label{{"cause", cause}}, monotone: true}
		}
		return series{base: "differential_txn_" + sanitize(rest), monotone: rest == "committed" || rest == "fenced"}
	case strings.HasPrefix(name, "differential."):
		return series{base: sanitize(name)}
	}
	return saramaSeries(name)
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
	}
	if withStage {
		s.labels = append(s.labels, label{"stage", parts[n-2]})
	}
	return s, true
}

// saramaGroupMetrics are sarama's consumer-group metrics, whose names end
// in "-<group id>".
var saramaGroupMetrics = []string{
	"consumer-group-join-total-", "consumer-group-join-failed-",
	"consumer-group-sync-total-", "consumer-group-sync-failed-",
}

func saramaSeries(name string) series {
	for _, p := range saramaGroupMetrics {
		if g, ok := strings.CutPrefix(name, p); ok && g != "" {
			return series{base: "sarama_" + sanitize(strings.TrimSuffix(p, "-")), labels: []label{{"group", g}}}
		}
	}
	for _, v := range []struct{ sep, label string }{{"-for-broker-", "broker"}, {"-for-topic-", "topic"}} {
		if i := strings.LastIndex(name, v.sep); i > 0 && i+len(v.sep) < len(name) {
			return series{base: "sarama_" + sanitize(name[:i]), labels: []label{{v.label, name[i+len(v.sep):]}}}
		}
	}
	return series{base: "sarama_" + sanitize(name)}
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
