package httpauth_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/internal/testcerts"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") })

func status(t *testing.T, h http.Handler, r *http.Request) (int, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code == http.StatusOK {
		require.Equal(t, "secret", w.Body.String())
	} else {
		require.NotContains(t, w.Body.String(), "secret")
	}
	return w.Code, w.Header()
}

// TestToken: without the token, or with another one (longer, shorter, a
// prefix, in the wrong scheme), a guarded route answers 401 with the
// challenges; with it as a bearer token or as a Basic password it answers.
func TestToken(t *testing.T) {
	g := httpauth.New("s3cret-token", false)
	require.True(t, g.Enabled())
	h := g.Wrap(ok)
	req := func(auth string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	code, hdr := status(t, h, req(""))
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, []string{`Bearer realm="differential"`, `Basic realm="differential", charset="UTF-8"`}, hdr.Values("WWW-Authenticate"))
	for _, bad := range []string{"Bearer s3cret", "Bearer s3cret-token-and-more", "Bearer ", "Token s3cret-token", "s3cret-token", "Bearer S3CRET-TOKEN"} {
		code, _ := status(t, h, req(bad))
		require.Equal(t, http.StatusUnauthorized, code, bad)
	}
	basic := req("")
	basic.SetBasicAuth("anyone", "wrong")
	code, _ = status(t, h, basic)
	require.Equal(t, http.StatusUnauthorized, code)

	for _, good := range []string{"Bearer s3cret-token", "bearer s3cret-token"} {
		code, _ := status(t, h, req(good))
		require.Equal(t, http.StatusOK, code, good)
	}
	basic = req("")
	basic.SetBasicAuth("operator", "s3cret-token")
	code, _ = status(t, h, basic)
	require.Equal(t, http.StatusOK, code)
}

// TestOpenGuard: a Guard with neither a token nor client certificates lets
// every request through (the address protects the server).
func TestOpenGuard(t *testing.T) {
	for _, g := range []*httpauth.Guard{nil, httpauth.New("", false)} {
		require.False(t, g.Enabled())
		require.True(t, g.Allowed(httptest.NewRequest(http.MethodGet, "/", nil)))
		code, _ := status(t, g.Wrap(ok), httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, http.StatusOK, code)
	}
}

// TestClientCertificate serves a guarded route and an open one over
// ServerTLS with client CAs: a client with a certificate from those CAs
// sees both; one without a certificate gets the open route and 401 on the
// guarded one (the handshake does not require a certificate); one with a
// certificate from another CA fails the handshake; the token, when set, is
// the other way in.
func TestClientCertificate(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	other, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	cfg, err := httpauth.ServerTLS(httpauth.TLSFiles{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.CAFile})
	require.NoError(t, err)

	g := httpauth.New("tok", true)
	mux := http.NewServeMux()
	mux.Handle("/guarded", g.Wrap(ok))
	mux.Handle("/open", ok)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()

	client := func(s *testcerts.Set) *http.Client {
		roots := x509.NewCertPool()
		pem, err := os.ReadFile(certs.CAFile)
		require.NoError(t, err)
		require.True(t, roots.AppendCertsFromPEM(pem))
		c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if s != nil {
			kp, err := tls.LoadX509KeyPair(s.ClientCertFile, s.ClientKeyFile)
			require.NoError(t, err)
			c.Certificates = []tls.Certificate{kp}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
	}
	get := func(c *http.Client, path, token string) int {
		r, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	withCert, without := client(certs), client(nil)
	require.Equal(t, http.StatusOK, get(withCert, "/guarded", ""))
	require.Equal(t, http.StatusOK, get(withCert, "/open", ""))
	require.Equal(t, http.StatusUnauthorized, get(without, "/guarded", ""))
	require.Equal(t, http.StatusOK, get(without, "/guarded", "tok"))
	require.Equal(t, http.StatusOK, get(without, "/open", ""))

	_, err = client(other).Get(srv.URL + "/open")
	require.Error(t, err, "a certificate from another CA is refused at the handshake")
}

func TestServerTLSErrors(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	_, err = httpauth.ServerTLS(httpauth.TLSFiles{CertFile: certs.ServerCertFile})
	require.ErrorIs(t, err, httpauth.ErrIncomplete)
	_, err = httpauth.ServerTLS(httpauth.TLSFiles{CertFile: certs.ServerCertFile, KeyFile: certs.ClientKeyFile})
	require.ErrorContains(t, err, "server certificate")
	_, err = httpauth.ServerTLS(httpauth.TLSFiles{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, ClientCAFile: certs.ServerKeyFile})
	require.ErrorContains(t, err, "no PEM certificate")
}
