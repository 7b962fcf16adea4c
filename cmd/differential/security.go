package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/kafka"
)

// securityFlags are the TLS and SASL settings of run and produce.
type securityFlags struct {
	tls                bool
	caFile             string
	certFile, keyFile  string
	serverName         string
	insecureSkipVerify bool
	mechanism          string
	user               string
	password           kafka.Secret
	passwordFile       string
	tokenFile          string
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.tls, "tls", false, "connect to the brokers with TLS (implied by every --tls-* flag)")
	fs.StringVar(&s.caFile, "tls-ca-file", "", "PEM `file` of the CAs the brokers' certificates must chain to (default: the system's)")
	fs.StringVar(&s.certFile, "tls-cert-file", "", "client certificate, a PEM `file`, for brokers that require one (with --tls-key-file)")
	fs.StringVar(&s.keyFile, "tls-key-file", "", "the client certificate's private key, a PEM `file`")
	fs.StringVar(&s.serverName, "tls-server-name", "", "`name` the brokers' certificates must carry (default: the host of each address dialled)")
	fs.BoolVar(&s.insecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate: encrypted but not authenticated; for tests only (logged as a warning)")
	fs.Var(enumValue{&s.mechanism, append([]string{""}, kafka.SASLMechanisms...)}, "sasl-mechanism",
		"SASL mechanism: `PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER` (default: no SASL)")
	fs.StringVar(&s.user, "sasl-user", "", "SASL `user` (PLAIN, SCRAM)")
	fs.Var(secretValue{&s.password}, "sasl-password", "SASL `password` (PLAIN, SCRAM); prefer $DIFFERENTIAL_SASL_PASSWORD or --sasl-password-file: a command line is visible to other users")
	fs.StringVar(&s.passwordFile, "sasl-password-file", "", "`file` holding the SASL password (one line)")
	fs.StringVar(&s.tokenFile, "sasl-token-file", "", "`file` holding the OAUTHBEARER access token, read again at every connection")
}

// secretValue is a flag whose value is never printed (--help, errors).
type secretValue struct{ p *kafka.Secret }

func (v secretValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v secretValue) Set(s string) error {
	*v.p = kafka.Secret(s)
	return nil
}

// security validates the flags (errors name them) and returns the
// kafka.Security they describe, with the password file read.
func (s *securityFlags) security() (kafka.Security, error) {
	sec := kafka.Security{
		TLS: kafka.TLS{Enable: s.tls, CAFile: s.caFile, CertFile: s.certFile, KeyFile: s.keyFile,
			ServerName: s.serverName, InsecureSkipVerify: s.insecureSkipVerify},
		SASL: kafka.SASL{Mechanism: s.mechanism, User: s.user, Password: s.password, TokenFile: s.tokenFile},
	}
	if (s.certFile == "") != (s.keyFile == "") {
		return sec, usagef("--tls-cert-file and --tls-key-file go together: set both or neither")
	}
	for _, f := range []struct{ flag, path string }{
		{"tls-ca-file", s.caFile}, {"tls-cert-file", s.certFile}, {"tls-key-file", s.keyFile},
		{"sasl-password-file", s.passwordFile}, {"sasl-token-file", s.tokenFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return sec, usagef("--%s: %w", f.flag, err)
		}
	}
	if s.passwordFile != "" {
		if s.password != "" {
			return sec, usagef("--sasl-password and --sasl-password-file are two ways to give one password: set one")
		}
		b, err := os.ReadFile(s.passwordFile)
		if err != nil {
			return sec, usagef("--sasl-password-file: %w", err)
		}
		sec.SASL.Password = kafka.Secret(strings.TrimRight(string(b), "\r\n"))
		if sec.SASL.Password == "" {
			return sec, usagef("--sasl-password-file %s is empty", s.passwordFile)
		}
	}
	a := sec.SASL
	switch a.Mechanism {
	case "":
		if a.User != "" || a.Password != "" || a.TokenFile != "" {
			return sec, usagef("--sasl-user, --sasl-password(-file) and --sasl-token-file need --sasl-mechanism (%s)", strings.Join(kafka.SASLMechanisms, ", "))
		}
	case kafka.SASLOAuthBearer:
		if a.TokenFile == "" {
			return sec, usagef("--sasl-mechanism %s needs --sasl-token-file", a.Mechanism)
		}
		if a.User != "" || a.Password != "" {
			return sec, usagef("--sasl-mechanism %s takes no --sasl-user or password: the token carries the identity", a.Mechanism)
		}
	default:
		if a.User == "" || a.Password == "" {
			return sec, usagef("--sasl-mechanism %s needs --sasl-user and a password (--sasl-password, $DIFFERENTIAL_SASL_PASSWORD or --sasl-password-file)", a.Mechanism)
		}
		if a.TokenFile != "" {
			return sec, usagef("--sasl-token-file is for --sasl-mechanism %s", kafka.SASLOAuthBearer)
		}
	}
	// Reads the CA, certificate and key now, so a bad file is a usage error.
	if err := sec.Apply(sarama.NewConfig()); err != nil {
		return sec, usagef("%v", strings.TrimPrefix(err.Error(), "kafka: "))
	}
	return sec, nil
}

// insecureWarning is printed (or logged) when certificates are not verified.
const insecureWarning = "TLS certificate verification is OFF (--tls-insecure-skip-verify): the connection is encrypted, but anyone on the network path can impersonate the brokers; use it for tests only"

// securedSarama returns a copy of sc with sec applied.
func securedSarama(sc *sarama.Config, sec kafka.Security) (*sarama.Config, error) {
	c := *sc
	if err := sec.Apply(&c); err != nil {
		return nil, fmt.Errorf("TLS/SASL settings: %w", err)
	}
	return &c, nil
}
