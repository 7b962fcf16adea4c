#!/usr/bin/env bash
# kafka.sh — a local Apache Kafka (KRaft, no ZooKeeper) for tests, the demo and benchmarks.
#
#   bash scripts/kafka.sh fetch                 resolve Kafka's jars with mvn into the cache (once)
#   bash scripts/kafka.sh start [--brokers 1|3] [--sasl-ssl DIR]
#                                               format fresh storage, start, wait until it answers
#   bash scripts/kafka.sh status                print each node's pid and whether it runs
#   bash scripts/kafka.sh stop                  stop the recorded pids, wait for them, remove data
#
# Per-node control of a running cluster (N is a node number, 1..nodes; faults for tests):
#   bash scripts/kafka.sh kill N                SIGKILL node N and wait until it is gone
#   bash scripts/kafka.sh stop N                SIGTERM node N (a clean, controlled shutdown), wait for exit
#   bash scripts/kafka.sh pause N | resume N    SIGSTOP / SIGCONT node N (a GC pause, a partitioned node)
#   bash scripts/kafka.sh restart N             start a stopped or killed node again on its data, wait until it serves
#   bash scripts/kafka.sh insync                wait until every partition's replicas are all in sync
#   bash scripts/kafka.sh leader TOPIC PARTITION   print the node leading the partition
#   bash scripts/kafka.sh coordinator GROUP        print the node coordinating the consumer group
#
# Environment:
#   DIFFERENTIAL_KAFKA_CACHE  jar cache        (default: <repo>/.cache/kafka)
#   DIFFERENTIAL_KAFKA_DATA   data, logs, pids (default: <repo>/.kafka)
#   DIFFERENTIAL_KAFKA_PORT   first broker port (default: 9092; node i listens on PORT+i-1,
#                             its controller on PORT+10000+i-1)
#   DIFFERENTIAL_KAFKA_HEAP   JVM heap options per node (default: -Xms128m -Xmx512m)
#   DIFFERENTIAL_KAFKA_JVM_OPTS  more JVM options per node, for start and restart (default: none;
#                             -XX:TieredStopAtLevel=1 shortens a node start on 2 cores)
#   DIFFERENTIAL_KAFKA_START_TIMEOUT  seconds to wait for the cluster, a restarted node or
#                             in-sync replicas (default: 90)
#
# --sasl-ssl DIR adds a SASL_SSL listener to every node, node i on PORT+5+i-1 (the PLAINTEXT
# listener stays, for the readiness probe, the brokers among themselves and admin tools). DIR
# holds PEM files the caller made (scripts/kafka.sh makes no key): ca.pem (the CA that signed
# the server certificate), server.pem (the server's unencrypted PKCS#8 private key followed by
# its certificate chain, for 127.0.0.1), and users (one "name password" per line, both of
# [A-Za-z0-9._-]). Every user may log in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (SCRAM
# credentials are written at format time); OAUTHBEARER accepts Kafka's unsecured JWTs. No
# authorizer: an authenticated user may do everything.
#
# The Kafka jars come from the Maven repository the machine's mvn is configured for; nothing
# else is downloaded. Processes are stopped only by the pids this script recorded.
set -euo pipefail

KAFKA_VERSION=4.4.0      # org.apache.kafka:kafka_2.13, latest 4.x when pinned
LOG4J_VERSION=2.25.5     # the log4j-core Kafka 4.4.0 depends on; we add its slf4j 1.x binding
DEP_PLUGIN_VERSION=3.8.1 # maven-dependency-plugin

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${DIFFERENTIAL_KAFKA_CACHE:-$repo/.cache/kafka}"
dist="$cache/kafka-$KAFKA_VERSION"
libs="$dist/libs"
marker="$dist/.fetched"
data="${DIFFERENTIAL_KAFKA_DATA:-$repo/.kafka}"
base_port="${DIFFERENTIAL_KAFKA_PORT:-9092}"
heap="${DIFFERENTIAL_KAFKA_HEAP:--Xms128m -Xmx512m}"
jvm_opts="${DIFFERENTIAL_KAFKA_JVM_OPTS:-}"
start_timeout="${DIFFERENTIAL_KAFKA_START_TIMEOUT:-90}"
data_mark=.differential-kafka-data

log() { echo "kafka.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# ---------------------------------------------------------------- fetch

cmd_fetch() {
	if [[ -f "$marker" ]]; then
		log "Kafka $KAFKA_VERSION already fetched ($(wc -l <"$marker") jars in $libs)"
		return 0
	fi
	command -v mvn >/dev/null || die "mvn not found; install Maven 3 (and a JDK 17+)"
	command -v java >/dev/null || die "java not found; install a JDK 17+"
	local build="$cache/build"
	rm -rf "$build" "$libs"
	mkdir -p "$build"
	write_pom >"$build/pom.xml"
	log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies with mvn"
	if ! mvn -B -q -ntp -f "$build/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$build/libs" >"$build/mvn.log" 2>&1; then
		tail -n 40 "$build/mvn.log" >&2
		die "mvn could not resolve Kafka (full log: $build/mvn.log)"
	fi
	[[ -f "$build/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"
	mkdir -p "$dist"
	mv "$build/libs" "$libs"
	rm -rf "$build"
	# The marker is written last: an interrupted fetch leaves none and the next one starts over.
	(cd "$libs" && ls -1 -- *.jar) >"$marker.tmp"
	mv "$marker.tmp" "$marker"
	log "fetched $(wc -l <"$marker") jars into $libs"
}

write_pom() {
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/kafka.sh: only used to resolve a Kafka broker's classpath. -->
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.differential</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- Kafka logs through slf4j 1.x; this binds it to log4j2 so the broker logs to a file. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>$DEP_PLUGIN_VERSION</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
}

# ---------------------------------------------------------------- start

# Set by --sasl-ssl: the folder of the PEM files and users, and the users' names and passwords.
sasl_dir=""
sasl_users=()
sasl_passwords=()

cmd_start() {
	local n=1
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--brokers)
			[[ $# -ge 2 ]] || usage
			n="$2"
			shift 2
			;;
		--brokers=*)
			n="${1#--brokers=}"
			shift
			;;
		--sasl-ssl)
			[[ $# -ge 2 ]] || usage
			sasl_dir="$2"
			shift 2
			;;
		--sasl-ssl=*)
			sasl_dir="${1#--sasl-ssl=}"
			shift
			;;
		*) usage ;;
		esac
	done
	[[ "$n" == 1 || "$n" == 3 ]] || die "--brokers must be 1 or 3, got $n"
	if [[ -n "$sasl_dir" ]]; then
		read_sasl_dir
	fi
	[[ -f "$marker" ]] || die "Kafka is not fetched; run: bash scripts/kafka.sh fetch"
	if any_running; then
		die "a broker recorded in $data is still running; run: bash scripts/kafka.sh stop"
	fi
	local i
	for ((i = 0; i < n; i++)); do
		port_free $((base_port + i)) || die "port $((base_port + i)) is in use"
		port_free $((base_port + 10000 + i)) || die "port $((base_port + 10000 + i)) is in use"
		if [[ -n "$sasl_dir" ]]; then
			port_free $((base_port + 5 + i)) || die "port $((base_port + 5 + i)) is in use"
		fi
	done

	remove_data
	mkdir -p "$data/bin"
	touch "$data/$data_mark"
	local cluster_id voters="" addrs="" secure_addrs=""
	cluster_id="$(new_cluster_id)"
	for ((i = 1; i <= n; i++)); do
		voters+="${voters:+,}$i@127.0.0.1:$((base_port + 10000 + i - 1))"
		addrs+="${addrs:+,}127.0.0.1:$((base_port + i - 1))"
		secure_addrs+="${secure_addrs:+,}127.0.0.1:$((base_port + 5 + i - 1))"
	done
	# SCRAM credentials are part of the formatted metadata (KRaft has no ZooKeeper to add them to).
	local scram=()
	for ((i = 0; i < ${#sasl_users[@]}; i++)); do
		scram+=(--add-scram "SCRAM-SHA-256=[name=${sasl_users[$i]},password=${sasl_passwords[$i]}]"
			--add-scram "SCRAM-SHA-512=[name=${sasl_users[$i]},password=${sasl_passwords[$i]}]")
	done
	for ((i = 1; i <= n; i++)); do
		mkdir -p "$data/node-$i/logs"
		write_server_properties "$i" "$n" "$voters" >"$data/node-$i/server.properties"
		write_log4j2 >"$data/node-$i/log4j2.properties"
	done

	# Formatting is one short JVM per node; run them side by side.
	local pids=()
	for ((i = 1; i <= n; i++)); do
		jvm_args "$i"
		"$(java_bin)" "${jargs[@]}" -Xmx256m -XX:TieredStopAtLevel=1 \
			"-Dkafka.logs.dir=$data/node-$i/logs/format" \
			kafka.tools.StorageTool format --ignore-formatted \
			-t "$cluster_id" -c "$data/node-$i/server.properties" ${scram[@]+"${scram[@]}"} \
			>"$data/node-$i/logs/format.log" 2>&1 </dev/null &
		pids+=("$!")
	done
	for ((i = 1; i <= n; i++)); do
		if ! wait "${pids[$((i - 1))]}"; then
			cat "$data/node-$i/logs/format.log" >&2
			die "formatting storage of node $i failed"
		fi
	done

	for ((i = 1; i <= n; i++)); do
		start_node "$i"
	done
	echo "$addrs" >"$data/bootstrap"
	if [[ -n "$sasl_dir" ]]; then
		echo "$secure_addrs" >"$data/bootstrap-sasl-ssl"
	fi

	# Build the readiness probe (and the per-node commands' helper) while the JVMs boot.
	if ! (cd "$repo" && go build -o "$data/bin/kafkaready" ./scripts/kafkaready &&
		go build -o "$data/bin/kafkactl" ./scripts/kafkactl); then
		stop_nodes
		die "building scripts/kafkaready or scripts/kafkactl failed"
	fi
	local node_pids=""
	for ((i = 1; i <= n; i++)); do
		node_pids+="${node_pids:+,}$(cat "$data/node-$i/kafka.pid")"
	done
	if ! "$data/bin/kafkaready" -brokers "$addrs" -expect "$n" -pids "$node_pids" -timeout "${start_timeout}s"; then
		for ((i = 1; i <= n; i++)); do
			log "---- last lines of $data/node-$i/logs/server.log"
			tail -n 30 "$data/node-$i/logs/server.log" >&2 2>/dev/null || true
			tail -n 10 "$data/node-$i/logs/stdout.log" >&2 2>/dev/null || true
		done
		stop_nodes
		die "Kafka did not become ready (logs kept in $data/node-*/logs)"
	fi
	log "Kafka $KAFKA_VERSION is up with $n node(s); logs in $data/node-*/logs/server.log"
	if [[ -n "$sasl_dir" ]]; then
		log "SASL_SSL listeners: $secure_addrs (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; users from $sasl_dir/users)"
	fi
	echo "$addrs"
}

# start_node ID: start node ID's JVM in the background and record its pid.
start_node() {
	local id="$1" heap_words opt_words
	read -ra heap_words <<<"$heap"
	read -ra opt_words <<<"$jvm_opts"
	jvm_args "$id"
	nohup "$(java_bin)" "${heap_words[@]}" "${opt_words[@]}" "${jargs[@]}" kafka.Kafka "$data/node-$id/server.properties" \
		>>"$data/node-$id/logs/stdout.log" 2>&1 </dev/null &
	echo "$!" >"$data/node-$id/kafka.pid"
}

# read_sasl_dir checks --sasl-ssl's folder and reads its users.
read_sasl_dir() {
	[[ -d "$sasl_dir" ]] || die "--sasl-ssl $sasl_dir: not a directory"
	sasl_dir="$(cd "$sasl_dir" && pwd)"
	local f
	for f in ca.pem server.pem users; do
		[[ -f "$sasl_dir/$f" ]] || die "--sasl-ssl $sasl_dir: $f is missing (see the header of scripts/kafka.sh)"
	done
	local name pass extra
	while read -r name pass extra || [[ -n "$name" ]]; do
		[[ -z "$name" || "$name" == \#* ]] && continue
		[[ -z "$extra" && "$name" =~ ^[A-Za-z0-9._-]+$ && "$pass" =~ ^[A-Za-z0-9._-]+$ ]] ||
			die "--sasl-ssl $sasl_dir/users: each line must be \"name password\", both of [A-Za-z0-9._-]"
		sasl_users+=("$name")
		sasl_passwords+=("$pass")
	done <"$sasl_dir/users"
	((${#sasl_users[@]} > 0)) || die "--sasl-ssl $sasl_dir/users names no user"
}

# A Kafka cluster id is 16 random bytes in URL-safe base64 without padding (22 characters).
# A random KRaft cluster id (16 bytes, URL-safe base64). One that starts with '-' would be read
# as an option by kafka-storage ("expected one argument"), so such ids are drawn again.
new_cluster_id() {
	local id
	while :; do
		id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
		[[ "$id" == -* ]] || break
	done
	printf '%s\n' "$id"
}

write_server_properties() {
	local id="$1" n="$2" voters="$3"
	local port=$((base_port + id - 1)) cport=$((base_port + 10000 + id - 1)) sport=$((base_port + 5 + id - 1))
	local min_isr=1
	[[ "$n" == 3 ]] && min_isr=2
	cat <<EOF
# Generated by scripts/kafka.sh for a local test cluster of $n node(s).
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport${sasl_dir:+,SASL_SSL://127.0.0.1:$sport}
advertised.listeners=PLAINTEXT://127.0.0.1:$port${sasl_dir:+,SASL_SSL://127.0.0.1:$sport}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT${sasl_dir:+,SASL_SSL:SASL_SSL}
log.dirs=$data/node-$id/data

num.partitions=1
default.replication.factor=$n
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$n
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$n
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$n
share.coordinator.state.topic.min.isr=$min_isr

auto.create.topics.enable=false
delete.topic.enable=true
# Generated workloads carry event times weeks back; with the default 7-day
# time retention the broker would delete their segments while tests run.
log.retention.ms=-1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500

# Two cores for the whole machine: keep the thread pools small.
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
EOF
	if [[ -n "$sasl_dir" ]]; then
		write_sasl_ssl_properties
	fi
}

# The SASL_SSL listener: PEM key store and trust store, and a login module per mechanism.
write_sasl_ssl_properties() {
	local plain_users="" i
	for ((i = 0; i < ${#sasl_users[@]}; i++)); do
		plain_users+=" user_${sasl_users[$i]}=\"${sasl_passwords[$i]}\""
	done
	cat <<EOF

# SASL_SSL listener (scripts/kafka.sh start --sasl-ssl $sasl_dir)
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$sasl_dir/server.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$sasl_dir/ca.pem
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain_users;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
EOF
}

write_log4j2() {
	cat <<'EOF'
# Generated by scripts/kafka.sh: everything goes to logs/server.log of the node.
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

java_bin() {
	if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
		echo "$JAVA_HOME/bin/java"
	else
		command -v java
	fi
}

# jvm_args ID: sets the array jargs to the JVM options and classpath of node ID (no heap).
jvm_args() {
	local id="$1"
	jargs=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
		-XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
		"-Dkafka.logs.dir=$data/node-$id/logs"
		"-Dlog4j2.configurationFile=$data/node-$id/log4j2.properties"
		-cp "$libs/*")
}

# remove_data deletes the data folder, but only one this script made (it holds data_mark)
# or an empty one, so a mistyped DIFFERENTIAL_KAFKA_DATA cannot remove anything else.
remove_data() {
	[[ -e "$data" ]] || return 0
	if [[ -f "$data/$data_mark" || -z "$(ls -A "$data" 2>/dev/null)" ]]; then
		rm -rf "$data"
	else
		die "refusing to remove $data: it was not made by scripts/kafka.sh"
	fi
}

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---------------------------------------------------------------- stop / status

pid_files() {
	local f
	for f in "$data"/node-*/kafka.pid; do
		[[ -f "$f" ]] && echo "$f"
	done
	return 0
}

# alive PIDFILE: the recorded process still runs and is the broker this script started for
# that node (its command line names the node's config), so a reused pid is never signalled.
alive() {
	local pidfile="$1" pid
	pid="$(cat "$pidfile" 2>/dev/null)" || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$(dirname "$pidfile")/server.properties"
}

any_running() {
	local f
	for f in $(pid_files); do
		alive "$f" && return 0
	done
	return 1
}

# stop_nodes: SIGTERM every recorded live broker, wait up to 30 s, then SIGKILL what is left.
stop_nodes() {
	local f pid live=()
	for f in $(pid_files); do
		if alive "$f"; then
			pid="$(cat "$f")"
			kill -TERM "$pid" 2>/dev/null || true
			kill -CONT "$pid" 2>/dev/null || true # a paused node handles SIGTERM once continued
			live+=("$f")
		fi
	done
	local deadline=$((SECONDS + 30))
	for f in "${live[@]}"; do
		while alive "$f" && ((SECONDS < deadline)); do
			sleep 0.2
		done
		if alive "$f"; then
			pid="$(cat "$f")"
			log "node $(basename "$(dirname "$f")") (pid $pid) ignored SIGTERM for 30s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			while alive "$f"; do sleep 0.1; done
		fi
	done
}

cmd_stop() {
	if [[ $# -eq 1 ]]; then
		cmd_stop_node "$1"
		return
	fi
	[[ $# -eq 0 ]] || usage
	if [[ ! -d "$data" ]]; then
		log "nothing to stop ($data does not exist)"
		return 0
	fi
	stop_nodes
	remove_data
	log "stopped; removed $data"
}

cmd_status() {
	[[ $# -eq 0 ]] || usage
	local f running=0 total=0
	for f in $(pid_files); do
		total=$((total + 1))
		if alive "$f"; then
			running=$((running + 1))
			if paused "$(cat "$f")"; then
				echo "$(basename "$(dirname "$f")"): paused (pid $(cat "$f"))"
			else
				echo "$(basename "$(dirname "$f")"): running (pid $(cat "$f"))"
			fi
		else
			echo "$(basename "$(dirname "$f")"): not running (pid $(cat "$f" 2>/dev/null || echo '?'))"
		fi
	done
	if ((total == 0)); then
		echo "no broker recorded in $data"
		return 3
	fi
	echo "bootstrap: $(cat "$data/bootstrap" 2>/dev/null || echo '?')"
	((running == total)) || return 3
}

# ---------------------------------------------------------------- per-node control

# node_arg N: checks that node N exists in the recorded cluster; sets nodedir and pidfile.
node_arg() {
	local id="$1"
	[[ "$id" =~ ^[1-9][0-9]*$ ]] || die "node must be a number 1..N, got '$id'"
	nodedir="$data/node-$id"
	pidfile="$nodedir/kafka.pid"
	[[ -f "$nodedir/server.properties" ]] || die "no node $id recorded in $data (start the cluster first: bash scripts/kafka.sh start --brokers 3)"
}

# node_addr N: node N's broker address, from the addresses start recorded.
node_addr() {
	local addrs
	IFS=, read -ra addrs <"$data/bootstrap"
	echo "${addrs[$(($1 - 1))]}"
}

# paused PID: the process is stopped (SIGSTOP): state T in /proc/PID/stat.
paused() {
	local state
	state="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null)" || return 1
	[[ "$state" == T ]]
}

# wait_gone PIDFILE SECONDS: waits until the recorded process has exited; 1 on timeout.
wait_gone() {
	local deadline=$((SECONDS + $2))
	while alive "$1"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# kafkactl ARGS...: runs the Go helper, building it first if start did not (an older cluster).
kafkactl() {
	if [[ ! -x "$data/bin/kafkactl" ]]; then
		mkdir -p "$data/bin"
		(cd "$repo" && go build -o "$data/bin/kafkactl" ./scripts/kafkactl) || die "building scripts/kafkactl failed"
	fi
	"$data/bin/kafkactl" "$@"
}

signal_node() {
	local sig="$1" id="$2"
	node_arg "$id"
	alive "$pidfile" || die "node $id is not running"
	kill "-$sig" "$(cat "$pidfile")"
}

cmd_kill() {
	[[ $# -eq 1 ]] || usage
	signal_node KILL "$1"
	wait_gone "$pidfile" 30 || die "node $1 (pid $(cat "$pidfile")) still runs 30s after SIGKILL"
	log "node $1 killed"
}

cmd_stop_node() {
	local id="$1" pid
	node_arg "$id"
	alive "$pidfile" || die "node $id is not running"
	pid="$(cat "$pidfile")"
	kill -TERM "$pid"
	kill -CONT "$pid" 2>/dev/null || true # a paused node handles SIGTERM once continued
	if ! wait_gone "$pidfile" 60; then
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pidfile" 30 || true
		die "node $id (pid $pid) ignored SIGTERM for 60s; sent SIGKILL"
	fi
	log "node $id stopped"
}

cmd_pause() {
	[[ $# -eq 1 ]] || usage
	signal_node STOP "$1"
	log "node $1 paused"
}

cmd_resume() {
	[[ $# -eq 1 ]] || usage
	signal_node CONT "$1"
	log "node $1 resumed"
}

cmd_restart() {
	[[ $# -eq 1 ]] || usage
	local id="$1" addr
	node_arg "$id"
	[[ -f "$marker" ]] || die "Kafka is not fetched; run: bash scripts/kafka.sh fetch"
	if alive "$pidfile"; then
		die "node $id is still running (pid $(cat "$pidfile")); stop or kill it first"
	fi
	addr="$(node_addr "$id")"
	port_free "${addr##*:}" || die "port ${addr##*:} of node $id is in use by another process"
	start_node "$id"
	if ! kafkactl -brokers "$addr" -node "$id" -pid "$(cat "$pidfile")" -timeout "${start_timeout}s" serving; then
		tail -n 30 "$nodedir/logs/server.log" >&2 2>/dev/null || true
		tail -n 10 "$nodedir/logs/stdout.log" >&2 2>/dev/null || true
		die "node $id did not serve again (it may still be starting; logs in $nodedir/logs)"
	fi
	log "node $id restarted (pid $(cat "$pidfile")) and serving on $addr"
}

cmd_insync() {
	[[ $# -eq 0 ]] || usage
	[[ -f "$data/bootstrap" ]] || die "no cluster recorded in $data"
	kafkactl -brokers "$(cat "$data/bootstrap")" -timeout "${start_timeout}s" insync
}

cmd_leader() {
	[[ $# -eq 2 ]] || usage
	[[ -f "$data/bootstrap" ]] || die "no cluster recorded in $data"
	kafkactl -brokers "$(cat "$data/bootstrap")" leader "$1" "$2"
}

cmd_coordinator() {
	[[ $# -eq 1 ]] || usage
	[[ -f "$data/bootstrap" ]] || die "no cluster recorded in $data"
	kafkactl -brokers "$(cat "$data/bootstrap")" coordinator "$1"
}

main() {
	[[ $# -ge 1 ]] || usage
	local cmd="$1"
	shift
	case "$cmd" in
	fetch)
		[[ $# -eq 0 ]] || usage
		cmd_fetch
		;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	status) cmd_status "$@" ;;
	kill) cmd_kill "$@" ;;
	pause) cmd_pause "$@" ;;
	resume) cmd_resume "$@" ;;
	restart) cmd_restart "$@" ;;
	insync) cmd_insync "$@" ;;
	leader) cmd_leader "$@" ;;
	coordinator) cmd_coordinator "$@" ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
