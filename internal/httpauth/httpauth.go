package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Guard decides whether a request may see a guarded route.
type Guard struct {
	token      [sha256.Size]byte // SHA-256 of the token, when hasToken
	hasToken   bool
	clientCert bool
}

// New returns the Guard that accepts the bearer token token (none when
// empty) and, when clientCert, any request whose TLS connection carries a
// client certificate the server verified.
func New(token string, clientCert bool) *Guard {
	g := &Guard{clientCert: clientCert}
	if token != "" {
		g.token, g.hasToken = sha256.Sum256([]byte(token)), true
	}
	return g
}

// Enabled reports whether the Guard checks anything (a token or client
// certificates); a Guard that does not lets every request through.
func (g *Guard) Enabled() bool { return g != nil && (g.hasToken || g.clientCert) }

// Allowed reports whether r may see a guarded route.
func (g *Guard) Allowed(r *http.Request) bool {
	if !g.Enabled() {
		return true
	}
	if g.clientCert && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if !g.hasToken {
		return false
	}
	given, ok := credential(r)
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(sum[:], g.token[:]) == 1
}

// credential is the token a request carries: an Authorization header's
// bearer token, or its Basic password.
func credential(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok), true
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return pw, true
	}
	return "", false
}

// Wrap returns h behind the Guard: a request it does not allow is answered
// 401 with the challenges it would accept, and h never sees it.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	if !g.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Allowed(r) {
			h.ServeHTTP(w, r)
			return
		}
		g.refuse(w)
	})
}

func (g *Guard) refuse(w http.ResponseWriter) {
	hdr := w.Header()
	what := "a client certificate"
	if g.hasToken {
		hdr.Add("WWW-Authenticate", `Bearer realm="differential"`)
		hdr.Add("WWW-Authenticate", `Basic realm="differential", charset="UTF-8"`)
		what = "the bearer token (Authorization: Bearer <token>, or as the Basic password)"
		if g.clientCert {
			what += " or a client certificate"
		}
	}
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = fmt.Fprintf(w, "unauthorized: this route needs %s\n", what)
}

// TLSFiles are the PEM files of a server's TLS, in the style of the Kafka
// client's options.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate chain and its
	// private key (both required for TLS).
	CertFile, KeyFile string
	// ClientCAFile holds the CAs a client certificate must chain to; empty:
	// no client certificates are asked for.
	ClientCAFile string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// ErrIncomplete is returned by ServerTLS when the certificate or its key
// is missing.
var ErrIncomplete = errors.New("a server certificate needs both its certificate file and its key file")

// ServerTLS reads the files into a server tls.Config (TLS 1.2 or later).
// With ClientCAFile it asks every client for a certificate and verifies
// the ones it gets against those CAs, without requiring one (see the
// package doc).
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, ErrIncomplete
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate %s, key %s: %w", f.CertFile, f.KeyFile, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA file %s: no PEM certificate in it", f.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// String says what the Guard accepts, for a log line.
func (g *Guard) String() string {
	switch {
	case !g.Enabled():
		return "none (open)"
	case g.hasToken && g.clientCert:
		return "bearer token or client certificate"
	case g.hasToken:
		return "bearer token"
	}
	return "client certificate"
}
