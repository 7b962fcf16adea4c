package kafka

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// Secret is a credential (a SASL password). Every printed form of it is
// redacted — String, GoString, LogValue, MarshalText — so a Secret that
// reaches a log line, an error, a %+v of a Config or a JSON dump shows
// "[redacted]". Only string(s) reads it.
type Secret string

const redacted = "[redacted]"

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer (%#v).
func (s Secret) GoString() string { return `kafka.Secret("` + s.String() + `")` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler (JSON, YAML, slog's text
// handler): the redacted form.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// TLS configures encrypted connections to the brokers. The zero value is
// plaintext; TLS is on when Enable or any other field is set.
type TLS struct {
	// Enable turns TLS on with the system's root CAs when no other field
	// is set.
	Enable bool
	// CAFile is a PEM file of the CA certificates the brokers' certificates
	// must chain to. Default: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate (chain) and
	// private key, for brokers that authenticate clients by certificate
	// (ssl.client.auth=required). Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry. Default:
	// the host of the address dialled.
	ServerName string
	// InsecureSkipVerify accepts any certificate the brokers present: the
	// connection is encrypted but anyone on the path can impersonate the
	// brokers. For tests only; Run logs a warning when it is set.
	InsecureSkipVerify bool
}

// Enabled reports whether t turns TLS on.
func (t TLS) Enabled() bool {
	return t.Enable || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// The SASL mechanisms SASL.Mechanism accepts.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
)

// SASLMechanisms lists the mechanisms SASL.Mechanism accepts.
var SASLMechanisms = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer}

// SASL configures how the client authenticates to the brokers. The zero
// value (no Mechanism) is no SASL.
type SASL struct {
	// Mechanism is one of SASLMechanisms; empty: no SASL.
	Mechanism string
	// User and Password authenticate PLAIN and SCRAM.
	User     string
	Password Secret `json:"-"`
	// TokenFile holds the OAUTHBEARER access token (a JWT, whitespace
	// around it ignored). It is read at every connection, so whatever
	// refreshes the token can rewrite the file while the client runs.
	TokenFile string
}

// Security is how the clients reach a secured cluster: Config.Security and
// ProducerConfig.Security. The zero value leaves the base sarama
// configuration's Net.TLS and Net.SASL as they are.
type Security struct {
	TLS  TLS
	SASL SASL
}

// IsZero reports whether s configures neither TLS nor SASL.
func (s Security) IsZero() bool { return !s.TLS.Enabled() && s.SASL == (SASL{}) }

// Validate reports the first problem of s without reading any file.
func (s Security) Validate() error {
	t := s.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("kafka: Security.TLS.CertFile and KeyFile go together: set both or neither")
	}
	a := s.SASL
	switch a.Mechanism {
	case "":
		if a.User != "" || a.Password != "" || a.TokenFile != "" {
			return errors.New("kafka: Security.SASL has credentials but no Mechanism (" + strings.Join(SASLMechanisms, ", ") + ")")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		switch {
		case a.User == "":
			return fmt.Errorf("kafka: Security.SASL.User is required with %s", a.Mechanism)
		case a.Password == "":
			return fmt.Errorf("kafka: Security.SASL.Password is required with %s", a.Mechanism)
		case a.TokenFile != "":
			return fmt.Errorf("kafka: Security.SASL.TokenFile is for %s, not %s", SASLOAuthBearer, a.Mechanism)
		}
	case SASLOAuthBearer:
		switch {
		case a.TokenFile == "":
			return fmt.Errorf("kafka: Security.SASL.TokenFile is required with %s", SASLOAuthBearer)
		case a.User != "" || a.Password != "":
			return fmt.Errorf("kafka: Security.SASL.User and Password are not used with %s (the token carries the identity)", SASLOAuthBearer)
		}
	default:
		return fmt.Errorf("kafka: Security.SASL.Mechanism %q is not one of %s", a.Mechanism, strings.Join(SASLMechanisms, ", "))
	}
	return nil
}

// Apply sets sc.Net.TLS and sc.Net.SASL from s, reading the CA, certificate
// and key files now (the token file is read at each connection). A zero
// Security leaves sc unchanged. Errors name the field and file, never a
// secret.
func (s Security) Apply(sc *sarama.Config) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.TLS.Enabled() {
		tc, err := s.TLS.config()
		if err != nil {
			return err
		}
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = tc
	}
	a := s.SASL
	if a.Mechanism == "" {
		return nil
	}
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Handshake = true
	sc.Net.SASL.Mechanism = sarama.SASLMechanism(a.Mechanism)
	sc.Net.SASL.User = a.User
	sc.Net.SASL.Password = string(a.Password)
	switch a.Mechanism {
	case SASLScramSHA256:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha256Hash} }
	case SASLScramSHA512:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha512Hash} }
	case SASLOAuthBearer:
		sc.Net.SASL.TokenProvider = tokenFile(a.TokenFile)
	}
	return nil
}

func (t TLS) config() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // #nosec G402 -- opt-in, warned about
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: Security.TLS.CAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka: Security.TLS.CAFile %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: Security.TLS.CertFile %s and KeyFile %s: %w", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// scramClient is sarama's SCRAMClient on xdg-go/scram (RFC 5802/7677).
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

var (
	sha256Hash scram.HashGeneratorFcn = sha256.New
	sha512Hash scram.HashGeneratorFcn = sha512.New
)

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		// xdg-go's SASLprep errors quote no input, but be sure.
		return errors.New("kafka: SCRAM: the user or password is not valid SASLprep text")
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }
func (c *scramClient) Done() bool                            { return c.conv.Done() }

// tokenFile is an OAUTHBEARER sarama.AccessTokenProvider reading a file at
// every call, so a token refreshed on disk is used by the next connection.
type tokenFile string

func (f tokenFile) Token() (*sarama.AccessToken, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("kafka: OAUTHBEARER token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("kafka: OAUTHBEARER token file %s is empty", string(f))
	}
	return &sarama.AccessToken{Token: tok}, nil
}

// ErrAuthentication marks connection errors that come from TLS or SASL:
// errors.Is(err, ErrAuthentication) on what Run and NewProducer return.
var ErrAuthentication = errors.New("kafka: could not authenticate to the brokers")

// ExplainConnect turns a failed connection (sarama.NewClient and the like)
// into an error that says what to check when the cause is TLS or SASL, and
// wraps ErrAuthentication. Other errors are returned unchanged. Run and
// NewProducer apply it to their own connections; it is exported for
// callers that open sarama clients with a Security themselves.
func ExplainConnect(err error, sec Security) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		recordHdr   tls.RecordHeaderError
		verifyError *tls.CertificateVerificationError
	)
	var hint string
	switch {
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		hint = fmt.Sprintf("SASL %s authentication failed for user %q: check the user and password (or token)", sec.SASL.Mechanism, sec.SASL.User)
		if sec.SASL.Mechanism == "" {
			hint = "SASL authentication failed"
		}
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		hint = fmt.Sprintf("the brokers do not enable SASL mechanism %s: use one their listener enables (sasl.enabled.mechanisms)", sec.SASL.Mechanism)
	case errors.As(err, &unknownCA):
		hint = "TLS: the brokers' certificate is not signed by a trusted CA: check the CA file"
		if sec.TLS.CAFile != "" {
			hint += " (" + sec.TLS.CAFile + ")"
		}
	case errors.As(err, &hostname):
		hint = "TLS: the brokers' certificate does not name the host dialled: check the broker addresses or set the TLS server name"
	case errors.As(err, &invalid), errors.As(err, &verifyError):
		hint = "TLS: the brokers' certificate failed verification: check the CA file and the certificate's validity"
	case errors.As(err, &recordHdr):
		hint = "TLS: the broker did not answer with TLS: is this a plaintext listener?"
	case sec.TLS.Enabled() && sec.SASL.Mechanism != "" && isEOF(err):
		hint = fmt.Sprintf("the broker closed the connection during the TLS handshake or SASL %s authentication for user %q: check the user and password (or token), that the listener is SASL_SSL and enables %[1]s", sec.SASL.Mechanism, sec.SASL.User)
	case sec.TLS.Enabled() && isEOF(err):
		hint = "the broker closed the connection during the TLS handshake: check that the listener speaks TLS (and whether it requires SASL or a client certificate)"
	case !sec.TLS.Enabled() && sec.SASL.Mechanism != "" && isEOF(err):
		hint = "the broker closed the connection during SASL: check that the listener is SASL_PLAINTEXT, or enable TLS for a SASL_SSL listener"
	default:
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrAuthentication, hint, err)
}

// isEOF reports an unexpected end of connection somewhere in err's chain,
// which sarama reports when the peer hangs up on a protocol it does not
// speak.
func isEOF(err error) bool {
	var ne net.Error
	return strings.Contains(err.Error(), "EOF") || (errors.As(err, &ne) && strings.Contains(ne.Error(), "reset by peer"))
}
