package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/internal/testcerts"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// The one user of the secured clusters and its password.
const (
	secureUser     = "alice"
	securePassword = "alice-S3cret.pw"
)

// securedCluster is a cluster whose listener takes only TLS connections
// authenticated with SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
type securedCluster struct {
	brokers []string
	certs   *testcerts.Set
	// wrongPassword is what a failed SCRAM login says: Kafka answers
	// SASL_AUTHENTICATION_FAILED, kfake hangs up.
	wrongPassword string
}

// TestSecuredClusterEmbedded runs the secured CLI scenario on the embedded
// broker with a TLS listener and SASL users: every go test runs it.
func TestSecuredClusterEmbedded(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	opts := []embedded.Opt{embedded.TLS(certs.ServerTLS())}
	for _, m := range []string{kafka.SASLPlain, kafka.SASLScramSHA256, kafka.SASLScramSHA512} {
		opts = append(opts, embedded.SASL(m, secureUser, securePassword))
	}
	c, err := embedded.Start(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	sc := securedCluster{brokers: c.Addrs(), certs: certs,
		wrongPassword: `the broker closed the connection during the TLS handshake or SASL SCRAM-SHA-512 authentication for user "alice": check the user and password`}
	testSecuredCLI(t, sc)
	produceWithEachMechanism(t, sc, kafka.SASLPlain, kafka.SASLScramSHA256)
}

// TestSecuredClusterKafka runs the same scenario on a real Kafka 4 broker
// with a SASL_SSL listener, started here through scripts/kafka.sh on the
// ports from DIFFERENTIAL_TEST_SECURE_PORT (PLAINTEXT there, SASL_SSL at +5,
// controller at +10000; .ci/run sets it). The certificates and the users
// are made by the test; SCRAM users are created when the storage is formatted.
func TestSecuredClusterKafka(t *testing.T) {
	port := os.Getenv("DIFFERENTIAL_TEST_SECURE_PORT")
	if port == "" {
		t.Skip("DIFFERENTIAL_TEST_SECURE_PORT is not set: no real SASL_SSL broker (the embedded variant runs instead)")
	}
	base, err := strconv.Atoi(port)
	require.NoError(t, err, "DIFFERENTIAL_TEST_SECURE_PORT")
	dir := t.TempDir()
	certs, err := testcerts.Generate(filepath.Join(dir, "tls"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(certs.Dir, "users"), []byte(secureUser+" "+securePassword+"\n"), 0o600))

	script, err := filepath.Abs("../../scripts/kafka.sh")
	require.NoError(t, err)
	kafkaEnv := append(os.Environ(), "DIFFERENTIAL_KAFKA_PORT="+port, "DIFFERENTIAL_KAFKA_DATA="+filepath.Join(dir, "kafka"))
	if os.Getenv("DIFFERENTIAL_KAFKA_START_TIMEOUT") == "" {
		// This broker boots while other packages' tests load both cores.
		kafkaEnv = append(kafkaEnv, "DIFFERENTIAL_KAFKA_START_TIMEOUT=240")
	}
	kafkaSh := func(args ...string) *exec.Cmd {
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = kafkaEnv
		return cmd
	}
	start := time.Now()
	out, err := kafkaSh("start", "--sasl-ssl", certs.Dir).CombinedOutput()
	t.Cleanup(func() {
		if out, err := kafkaSh("stop").CombinedOutput(); err != nil {
			t.Errorf("kafka.sh stop: %v\n%s", err, out)
		}
	})
	require.NoError(t, err, "kafka.sh start --sasl-ssl:\n%s", out)
	t.Logf("secured Kafka started in %v", time.Since(start).Round(100*time.Millisecond))
	sc := securedCluster{brokers: []string{"127.0.0.1:" + strconv.Itoa(base+5)}, certs: certs,
		wrongPassword: `SASL SCRAM-SHA-512 authentication failed for user "alice": check the user and password (or token): ` +
			`kafka: client has run out of available brokers to talk to: kafka server: SASL Authentication failed`}
	testSecuredCLI(t, sc)
	produceWithEachMechanism(t, sc, kafka.SASLPlain, kafka.SASLScramSHA256, kafka.SASLOAuthBearer)
}

// produceWithEachMechanism: produce creates a topic and writes to it
// through each SASL mechanism (OAUTHBEARER with an unsecured JWT, which
// scripts/kafka.sh's listener accepts, from --sasl-token-file).
func produceWithEachMechanism(t *testing.T, c securedCluster, mechanisms ...string) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(securePassword), 0o600))
	now := time.Now().Unix()
	b64 := base64.RawURLEncoding.EncodeToString
	jwt := b64([]byte(`{"alg":"none"}`)) + "." + b64(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, secureUser, now, now+3600)) + "."
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(jwt+"\n"), 0o600))
	for _, m := range mechanisms {
		creds := []string{"--sasl-user", secureUser, "--sasl-password-file", pwFile}
		if m == kafka.SASLOAuthBearer {
			creds = []string{"--sasl-token-file", tokenFile}
		}
		topic := "mechanism-" + strings.ToLower(m)
		args := append([]string{"produce", "--brokers", strings.Join(c.brokers, ","), "--tls-ca-file", c.certs.CAFile,
			"--sasl-mechanism", m, "--topic", topic, "--create", "--partitions", "1", "--records", "10"}, creds...)
		code, stdout, stderr := runCLI(t, hooks{}, args...)
		require.Equal(t, exitOK, code, "%s: %s", m, stderr)
		require.Contains(t, stdout, "produced 10 records to "+topic, m)
	}
}

// testSecuredCLI: produce and run work end to end with the right TLS and
// SASL settings (from a configuration file, the environment and a
// password file); the outputs equal the reference model's; the password
// appears in no log line (sarama's debug log included), no error and not
// on /metrics; a wrong password and an untrusted CA each fail with exit 1
// and a message saying what to check.
func testSecuredCLI(t *testing.T, c securedCluster) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(securePassword+"\n"), 0o600))
	config := writeConfig(t, fmt.Sprintf("brokers: [%s]\ntls-ca-file: %s\nsasl-mechanism: SCRAM-SHA-512\nsasl-user: %s\n",
		strings.Join(c.brokers, ", "), c.certs.CAFile, secureUser))
	// produce gets the password from the environment.
	envPassword := func(pw string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "DIFFERENTIAL_SASL_PASSWORD" {
				return pw, true
			}
			return "", false
		}
	}
	in, out, dlq := "secured-events", "secured-attributions", "secured-dlq"
	for _, tp := range []struct {
		topic           string
		records, shards int
	}{{in, 3000, 3}, {out, 0, 3}, {dlq, 0, 1}} {
		code, stdout, stderr := runWithEnv(t, envPassword(securePassword), "produce", "--config", config, "--topic", tp.topic, "--create",
			"--records", strconv.Itoa(tp.records), "--partitions", strconv.Itoa(tp.shards), "--seed", "3",
			"--max-record-bytes", strconv.Itoa(testRecordBytes))
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf("produced %d records to %s", tp.records, tp.topic))
		require.NotContains(t, stdout+stderr, securePassword)
	}

	// run reads the password from a file; the group's commits reach the
	// end of every partition, and /metrics is scraped meanwhile.
	sc := sarama.NewConfig()
	sec := kafka.Security{TLS: kafka.TLS{CAFile: c.certs.CAFile},
		SASL: kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: secureUser, Password: securePassword}}
	require.NoError(t, sec.Apply(sc))
	client, err := sarama.NewClient(c.brokers, sc)
	require.NoError(t, err)
	defer client.Close()
	read := func(topic string) map[int32][]*sarama.ConsumerMessage {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		got, err := kfetch.ReadTopic(ctx, client, topic, false)
		require.NoError(t, err)
		return got
	}
	inputs := make([][]chain.Record, 3)
	ends := map[int32]int64{}
	for p, msgs := range read(in) {
		for _, m := range msgs {
			inputs[p] = append(inputs[p], chain.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp})
		}
		ends[p] = msgs[len(msgs)-1].Offset + 1
	}
	w := newWatcher()
	addrs := make(chan string, 1)
	args := []string{"run", "--config", config, "--sasl-password-file", pwFile, "--topic", in, "--output", out, "--dlq", dlq,
		"--group", "secured-group", "--state-dir", filepath.Join(dir, "state"), "--max-record-bytes", strconv.Itoa(testRecordBytes),
		"--commit-interval", "100ms", "--idle-timeout", "100ms", "--log-format", "json", "--log-level", "debug",
		"--metrics-addr", "127.0.0.1:0"}
	p := startCLI(t, hooks{chainOptions: w.member().options(), metricsListening: func(a string) { addrs <- a }}, args...)
	select {
	case <-w.reach(ends):
	case <-p.done:
		t.Fatalf("run exited with %d before the end; stderr:\n%s", p.code, tail(p.err.String()))
	case <-time.After(waitTimeout):
		t.Fatalf("the group did not commit every partition's end; stderr:\n%s", tail(p.err.String()))
	}
	status, body := get(t, "http://"+recv(t, addrs, "the metrics server")+"/metrics")
	require.Equal(t, 200, status)
	_, err = new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	require.Contains(t, body, "differential_partition_committed")
	require.NotContains(t, body, securePassword)
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))
	logs := p.err.String()
	require.Contains(t, logs, `"component":"sarama"`, "the debug log includes sarama's")
	require.NotContains(t, logs, securePassword)
	v := reference.Check(inputs, testRules(), reference.FromKafka(read(out)), reference.FromKafka(read(dlq)),
		reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	require.True(t, v.OK(), v.Summary())
	require.Positive(t, v.Installs.Matched)

	// A wrong password: exit 1 at once, saying what to check.
	const wrong = "not-the-password"
	for _, cmd := range [][]string{
		{"produce", "--config", config, "--topic", in, "--records", "1"},
		append(args[:len(args):len(args)], "--metrics-addr", ""),
	} {
		started := time.Now()
		code, stdout, stderr := runWithEnv(t, envPassword(wrong), replaceFlag(replaceFlag(cmd, "--sasl-password-file", ""), "--log-level", "info")...)
		t.Logf("%s with a wrong password failed in %v: %s", cmd[0], time.Since(started).Round(time.Millisecond), strings.TrimSpace(stderr))
		require.Equal(t, exitFatal, code, stderr)
		require.Contains(t, stderr, c.wrongPassword)
		require.NotContains(t, stdout+stderr, wrong)
	}

	// --tls-insecure-skip-verify connects without the CA, with a warning.
	code, stdout, stderr := runWithEnv(t, envPassword(securePassword), "produce", "--config", config, "--tls-ca-file", "",
		"--tls-insecure-skip-verify", "--topic", out, "--records", "0")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "produced 0 records to "+out)
	require.Contains(t, stderr, "WARNING: TLS certificate verification is OFF (--tls-insecure-skip-verify)")

	// A CA that did not sign the brokers' certificate.
	other, err := testcerts.Generate(filepath.Join(dir, "other-ca"))
	require.NoError(t, err)
	code, _, stderr = runWithEnv(t, envPassword(securePassword), "produce", "--config", config, "--tls-ca-file", other.CAFile,
		"--topic", in, "--records", "1")
	require.Equal(t, exitFatal, code, stderr)
	require.Contains(t, stderr, "TLS: the brokers' certificate is not signed by a trusted CA: check the CA file ("+other.CAFile+")")
	require.Contains(t, stderr, "x509: certificate signed by unknown authority")
}

// runWithEnv runs one command in-process with the given environment.
func runWithEnv(t *testing.T, lookup func(string) (string, bool), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var out, errb testutil.SyncBuffer
	code = cli(ctx, args, &env{stdout: &out, stderr: &errb, lookupEnv: lookup})
	return code, out.String(), errb.String()
}

// replaceFlag sets the value following name in args (an empty value drops
// the flag).
func replaceFlag(args []string, name, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == name && i+1 < len(args) {
			if value != "" {
				out = append(out, name, value)
			}
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
