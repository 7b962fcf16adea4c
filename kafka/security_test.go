package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/embedded"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/testcerts"
	"github.com/differential-dev/differential/kafka"
)

const testPassword = "s3cr3t-Pa55word"

// TestSecretNeverPrinted: a Config holding a SASL password prints it in no
// form a log line, an error message or a dump would use.
func TestSecretNeverPrinted(t *testing.T) {
	cfg := kafka.Config{Brokers: []string{"b:9093"}, Topic: "t", Group: "g", Security: kafka.Security{
		SASL: kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: "alice", Password: testPassword},
	}}
	var forms []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		forms = append(forms, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, cfg.Security.SASL.Password))
	}
	j, err := json.Marshal(cfg.Security)
	require.NoError(t, err)
	forms = append(forms, string(j))
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(h).Info("config", "cfg", cfg, "sasl", cfg.Security.SASL, "password", cfg.Security.SASL.Password)
	}
	forms = append(forms, logs.String())
	for _, f := range forms {
		require.NotContains(t, f, testPassword)
		require.NotContains(t, f, fmt.Sprintf("%x", testPassword))
	}
	require.Contains(t, fmt.Sprint(cfg.Security.SASL), "[redacted]")
	require.Equal(t, testPassword, string(cfg.Security.SASL.Password), "string() still reads it")
}

func TestSecurityValidate(t *testing.T) {
	ok := []kafka.Security{
		{},
		{TLS: kafka.TLS{Enable: true}},
		{SASL: kafka.SASL{Mechanism: kafka.SASLPlain, User: "u", Password: "p"}},
		{SASL: kafka.SASL{Mechanism: kafka.SASLOAuthBearer, TokenFile: "/run/token"}},
	}
	for _, s := range ok {
		require.NoError(t, s.Validate())
	}
	for _, tc := range []struct {
		s    kafka.Security
		want string
	}{
		{kafka.Security{TLS: kafka.TLS{CertFile: "c.pem"}}, "CertFile and KeyFile go together"},
		{kafka.Security{SASL: kafka.SASL{User: "u"}}, "credentials but no Mechanism"},
		{kafka.Security{SASL: kafka.SASL{Mechanism: "GSSAPI"}}, `Mechanism "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER`},
		{kafka.Security{SASL: kafka.SASL{Mechanism: kafka.SASLScramSHA256, Password: "p"}}, "User is required with SCRAM-SHA-256"},
		{kafka.Security{SASL: kafka.SASL{Mechanism: kafka.SASLPlain, User: "u"}}, "Password is required with PLAIN"},
		{kafka.Security{SASL: kafka.SASL{Mechanism: kafka.SASLOAuthBearer}}, "TokenFile is required with OAUTHBEARER"},
	} {
		err := tc.s.Validate()
		require.ErrorContains(t, err, tc.want)
		c := kafka.Config{Brokers: []string{"b:1"}, Topic: "t", Group: "g", Security: tc.s}
		require.ErrorContains(t, c.Validate(), tc.want, "Config.Validate checks Security")
	}
	// Files are read by Apply: a missing CA file is named.
	err := kafka.Security{TLS: kafka.TLS{CAFile: "/nonexistent/ca.pem"}}.Apply(sarama.NewConfig())
	require.ErrorContains(t, err, "Security.TLS.CAFile")
	require.ErrorContains(t, err, "/nonexistent/ca.pem")
}

// securedCluster starts an embedded cluster that accepts only TLS
// connections authenticated with SASL, with one user per mechanism.
func securedCluster(t *testing.T, certs *testcerts.Set) *embedded.Cluster {
	t.Helper()
	c, err := embedded.Start(embedded.TLS(certs.ServerTLS()),
		embedded.SASL(kafka.SASLPlain, "plain-user", testPassword),
		embedded.SASL(kafka.SASLScramSHA256, "scram256-user", testPassword),
		embedded.SASL(kafka.SASLScramSHA512, "scram512-user", testPassword))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestRunAndProduceOnSecuredCluster: with Security set, NewProducer and Run
// reach a TLS + SASL cluster (each SASL mechanism), and Run consumes and
// commits the partition's end; a wrong password and an untrusted CA fail
// at once with ErrAuthentication and a message saying what to check.
func TestRunAndProduceOnSecuredCluster(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	c := securedCluster(t, certs)
	brokers := c.Addrs()
	sec := func(mech, user string) kafka.Security {
		return kafka.Security{TLS: kafka.TLS{CAFile: certs.CAFile},
			SASL: kafka.SASL{Mechanism: mech, User: user, Password: testPassword}}
	}

	admin := sarama.NewConfig()
	require.NoError(t, sec(kafka.SASLScramSHA512, "scram512-user").Apply(admin))
	client, err := sarama.NewClient(brokers, admin)
	require.NoError(t, err)
	defer client.Close()
	ca, err := sarama.NewClusterAdminFromClient(client)
	require.NoError(t, err)
	for _, tc := range []struct{ mech, user string }{
		{kafka.SASLPlain, "plain-user"},
		{kafka.SASLScramSHA256, "scram256-user"},
		{kafka.SASLScramSHA512, "scram512-user"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			topic := "secured-" + strings.ToLower(tc.mech)
			require.NoError(t, ca.CreateTopic(topic, kadmin.NewTopic(1), false))
			s := sec(tc.mech, tc.user)
			prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Security: s})
			require.NoError(t, err)
			done := make(chan error, 1)
			prod.Produce(context.Background(), []chain.Message{
				{Topic: topic, Key: []byte("u1"), Value: []byte("click|1")},
				{Topic: topic, Key: []byte("u1"), Value: []byte("install|2")},
			}, func(err error) { done <- err })
			require.NoError(t, recvErr(t, done))
			require.NoError(t, prod.Close())

			obs := newEndObserver(2)
			ch, err := chain.New([]chain.Stage{{Name: "s", Processor: chain.ProcessorFunc(
				func(context.Context, *chain.Context, *chain.Event) error { return nil })}}, decoder,
				chain.WithCommitInterval(10*time.Millisecond), chain.WithObserver(obs))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() {
				ran <- kafka.Run(ctx, ch, kafka.Config{Brokers: brokers, Topic: topic, Group: "g-" + topic, Security: s})
			}()
			select {
			case <-obs.reached:
			case err := <-ran:
				t.Fatalf("Run returned before committing: %v", err)
			case <-time.After(waitTimeout):
				t.Fatal("no commit of the partition's end")
			}
			cancel()
			require.NoError(t, recvErr(t, ran))
		})
	}

	t.Run("insecure skip verify", func(t *testing.T) {
		s := sec(kafka.SASLScramSHA512, "scram512-user")
		s.TLS = kafka.TLS{InsecureSkipVerify: true}
		var logs bytes.Buffer
		prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Security: s, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err, "connects without the CA")
		require.NoError(t, prod.Close())
		require.Contains(t, logs.String(), "level=WARN msg=\"TLS certificate verification is OFF (InsecureSkipVerify)")
	})
	t.Run("wrong password", func(t *testing.T) {
		s := sec(kafka.SASLScramSHA512, "scram512-user")
		s.SASL.Password = "not-the-password"
		err := runOnce(t, brokers, s)
		require.ErrorIs(t, err, kafka.ErrAuthentication)
		// kfake hangs up on a failed SCRAM exchange where Kafka answers
		// SASL_AUTHENTICATION_FAILED (cmd/differential's real-broker test
		// checks that message).
		require.ErrorContains(t, err, `SASL SCRAM-SHA-512 authentication for user "scram512-user": check the user and password`)
		require.NotContains(t, err.Error(), "not-the-password")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other, err := testcerts.Generate(filepath.Join(t.TempDir(), "other"))
		require.NoError(t, err)
		s := sec(kafka.SASLScramSHA512, "scram512-user")
		s.TLS.CAFile = other.CAFile
		err = runOnce(t, brokers, s)
		require.ErrorIs(t, err, kafka.ErrAuthentication)
		require.ErrorContains(t, err, "not signed by a trusted CA: check the CA file ("+other.CAFile+")")
	})
	t.Run("plaintext client", func(t *testing.T) {
		s := sec(kafka.SASLScramSHA512, "scram512-user")
		s.TLS = kafka.TLS{}
		err := runOnce(t, brokers, s)
		require.ErrorIs(t, err, kafka.ErrAuthentication)
		require.ErrorContains(t, err, "enable TLS for a SASL_SSL listener")
	})
}

// runOnce runs a chain that must fail to connect, and checks it fails fast.
func runOnce(t *testing.T, brokers []string, s kafka.Security) error {
	t.Helper()
	ch, err := chain.New([]chain.Stage{{Name: "s", Processor: chain.ProcessorFunc(
		func(context.Context, *chain.Context, *chain.Event) error { return nil })}}, decoder)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	err = kafka.Run(ctx, ch, kafka.Config{Brokers: brokers, Topic: "any", Group: "g", Security: s})
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "fails fast")
	t.Logf("failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("timed out")
		return nil
	}
}

// endObserver closes reached once a commit reaches end.
type endObserver struct {
	end     int64
	once    sync.Once
	reached chan struct{}
}

func newEndObserver(end int64) *endObserver {
	return &endObserver{end: end, reached: make(chan struct{})}
}

func (o *endObserver) Begin(chain.BeginInfo)                         {}
func (o *endObserver) Advanced(string, int32, int, int64, time.Time) {}
func (o *endObserver) Committed(_ string, _ int32, off int64, _ string) {
	if off >= o.end {
		o.once.Do(func() { close(o.reached) })
	}
}
