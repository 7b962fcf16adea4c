#!/usr/bin/env bash
# cli-rate.sh — the throughput of `differential run` as a user runs it: start the job on a topic
# that already holds RECORDS records, and time it until every partition's committed offset is
# at the log end (lag 0). Prints wall seconds, records/s, process CPU (user+system) per record and
# the process's peak resident memory.
#
#   bash scripts/cli-rate.sh BINARY BROKERS TOPIC RECORDS [extra `run` flags...]
#
# Write the topic first, e.g.
#   differential produce --brokers 127.0.0.1:9092 --topic events-1m --create --records 1000000
# The output and dead-letter topics (TOPIC-out, TOPIC-dlq) are created when missing. Every call
# uses a new consumer group and a new state directory, so it always processes the whole topic.
set -euo pipefail

[[ $# -ge 4 ]] || { sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bin=$1 brokers=$2 topic=$3 records=$4
shift 4

"$bin" produce --brokers "$brokers" --topic "$topic-out" --create --records 0 >/dev/null 2>&1
"$bin" produce --brokers "$brokers" --topic "$topic-dlq" --create --partitions 1 --records 0 >/dev/null 2>&1

state=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
group="cli-rate-$$-$(date +%s)"
log="$state.log"
start=$(date +%s.%N)
"$bin" run --brokers "$brokers" --topic "$topic" --output "$topic-out" --dlq "$topic-dlq" \
	--group "$group" --state-dir "$state/db" --metrics-addr "127.0.0.1:$port" --log-level warn "$@" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$state" "$log"' EXIT

tick=$(getconf CLK_TCK)
while :; do
	sleep 0.5
	kill -0 $pid 2>/dev/null || { echo "cli-rate.sh: run exited early:" >&2; cat "$log" >&2; exit 1; }
	m=$(curl -fs "http://127.0.0.1:$port/metrics" || true)
	done=$(awk -v want="$records" '
		/^differential_partition_high_watermark\{/ { split($1, a, "partition=\""); split(a[2], b, "\""); hw[b[1]] = $2; sum += $2 }
		/^differential_partition_committed\{/      { split($1, a, "partition=\""); split(a[2], b, "\""); cm[b[1]] = $2 }
		END {
			if (sum < want) { print 0; exit }
			for (p in hw) if (cm[p] != hw[p]) { print 0; exit }
			print 1
		}' <<<"$m")
	if [[ $done == 1 ]]; then
		now=$(date +%s.%N)
		read -r ut st < <(awk '{print $14, $15}' "/proc/$pid/stat")
		hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
		break
	fi
done
awk -v s="$start" -v e="$now" -v n="$records" -v ut="$ut" -v st="$st" -v tk="$tick" -v hwm="$hwm" 'BEGIN {
	w = e - s; cpu = (ut + st) / tk
	printf "records %d  wall %.2f s  %.0f records/s  cpu %.2f s  %.1f us cpu/record  peak rss %.0f MB\n", n, w, n / w, cpu, cpu * 1e6 / n, hwm / 1024
}'
