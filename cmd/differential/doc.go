// Command differential is the CLI of the Differential Kafka consumer engine.
//
//	differential demo      the attribution chain on a generated workload, on an embedded broker, verified
//	differential run       the attribution chain against Kafka brokers (flags or a YAML --config)
//	differential produce   a generated, seeded attribution workload to a topic
//	differential bench     the chain engine against the micro-batch baseline (package bench)
//	differential heavykey  a heavy key's per-record cost against the other keys' (bench.HeavyKey)
//	differential version   the module and Go versions
//
// What it owns: wiring. It builds the attribution chain (attribution.NewChainWith,
// from one engineSettings whose defaults are chain's) with the Pebble store, the
// Kafka producer, one go-metrics registry shared by the engine and every sarama
// client, and the slog logger (dead-letter lines sampled per reason,
// logging.go), and hands it to kafka.Run; it serves /metrics and the probes
// /livez, /readyz and /healthz (internal/metricshttp). With --velocity-window (velocityflags.go) the
// chain has the velocity stage, its alerts go to --alerts and its metrics to the
// same registry; the demo then also verifies the alerts. With --otlp-endpoint
// (or the standard OTEL_EXPORTER_OTLP_*ENDPOINT variables; tracing.go) the
// chain gets chainotel's tracer over internal/otelx's OTLP/HTTP provider,
// flushed at exit. produce and demo write
// with workload.Write; the demo verifies with reference.Check. It adds no engine
// behaviour.
//
// Guarantees: exit 0 on success and after a clean stop (the first SIGTERM or
// SIGINT cancels the context; kafka.Run drains every partition and makes the
// final commits; a second signal kills the process at once); exit 1 on a
// fatal error, a missing topic, or a failed demo verification; exit 2 on bad
// flags or a bad configuration file, with a message naming the flag or key.
// `run` checks that its topics exist (and --alerts) before it opens the store.
//
// Settings: every flag of run and produce is also a DIFFERENTIAL_<FLAG>
// environment variable and a key of the YAML --config file, with the
// precedence flag > environment > file > default (settle); the two commands
// may share one file. A DIFFERENTIAL_* variable that is no setting of
// either (and not one the tests and scripts use, notSettings) is refused,
// as an unknown key of the file is; an error about a value set by the
// environment or the file names the variable or the line; run
// --print-config prints every value with its source. TLS and SASL
// (securityFlags) become a kafka.Security.
// Secrets are never echoed: not in errors, help, logs or /metrics. A bad
// flag prints one error line and a pointer to --help on stderr;
// `differential help <command>` prints a command's help.
//
// DIFFERENTIAL_CPUPROFILE=file makes any command write a CPU profile of the
// whole process to file (go tool pprof).
//
// Every command runs through cli(ctx, args, env), so tests run them
// in-process with their own context, writers and test-only hooks (an engine
// observer, a processor wrapper, the health clock, a way to break the demo's
// verification); the binary sets no hook. A build with the chaosbreak tag is
// the exception, and is never shipped: it wraps run's producer so that the
// fault-injection suite (internal/chaos) can show it catches a broken engine
// (hooks_chaosbreak.go).
package main
