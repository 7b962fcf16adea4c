package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/metricshttp"
	"github.com/differential-dev/differential/internal/testcerts"
	"github.com/differential-dev/differential/internal/testutil"
)

// TestHTTPFlags: an address without a host listens on 127.0.0.1, a named
// host as named; --metrics-addr is the same setting; the token comes from
// the flag, the environment or a file, and is never echoed; the TLS files
// go together.
func TestHTTPFlags(t *testing.T) {
	parse := func(vars map[string]string, args ...string) (runOptions, error) {
		e := &env{lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
		return parseRunOptions(append([]string{"--brokers", "k:9092"}, args...), e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-addr", ":9100"}, "127.0.0.1:9100"},
		{[]string{"--metrics-addr", ":0"}, "127.0.0.1:0"},
		{[]string{"--http-addr", "0.0.0.0:9100"}, "0.0.0.0:9100"},
		{[]string{"--http-addr", "[::1]:9100", "--metrics-addr", "[::1]:9100"}, "[::1]:9100"},
		{nil, ""},
	} {
		o, err := parse(nil, tc.args...)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.want, o.serving.addr, tc.args)
		require.False(t, o.serving.guard.Enabled(), tc.args)
	}

	o, err := parse(map[string]string{"DIFFERENTIAL_HTTP_TOKEN": "from-env", "DIFFERENTIAL_HTTP_ADDR": ":9100"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9100", o.serving.addr)
	require.Equal(t, "bearer token", o.serving.guard.String())

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("from-file\n"), 0o600))
	o, err = parse(nil, "--http-addr", ":9100", "--http-token-file", file)
	require.NoError(t, err)
	require.Equal(t, "bearer token", o.serving.guard.String())

	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	o, err = parse(nil, "--http-addr", ":9100", "--http-tls-cert-file", certs.ServerCertFile, "--http-tls-key-file", certs.ServerKeyFile,
		"--http-tls-client-ca-file", certs.CAFile, "--http-token", "t")
	require.NoError(t, err)
	require.NotNil(t, o.serving.tls)
	require.Equal(t, "bearer token or client certificate", o.serving.guard.String())

	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-addr", "9100"}, `--http-addr: "9100" is not host:port`},
		{[]string{"--http-addr", ":9100", "--metrics-addr", ":9200"}, "two addresses for the one HTTP server"},
		{[]string{"--http-token", "sekrit-value"}, "need --http-addr"},
		{[]string{"--http-addr", ":1", "--http-token", "sekrit-value", "--http-token-file", file}, "two ways to give one token"},
		{[]string{"--http-addr", ":1", "--http-token-file", empty}, "is empty"},
		{[]string{"--http-addr", ":1", "--http-token-file", empty + ".missing"}, "--http-token-file"},
		{[]string{"--http-addr", ":1", "--http-tls-cert-file", certs.ServerCertFile}, "go together"},
		{[]string{"--http-addr", ":1", "--http-tls-client-ca-file", certs.CAFile}, "go together"},
		{[]string{"--http-addr", ":1", "--http-tls-cert-file", certs.ServerCertFile, "--http-tls-key-file", certs.ClientKeyFile}, "--http-tls-*: server certificate"},
		{[]string{"--advertised-http-addr", "10.0.0.1:9100"}, "need --http-addr"},
		{[]string{"--http-addr", ":1", "--advertised-http-addr", "0.0.0.0:9100"}, "--advertised-http-addr: \"0.0.0.0:9100\" is not a host:port other members can reach"},
		{[]string{"--http-addr", ":1", "--advertised-http-addr", ":9100"}, "--advertised-http-addr"},
	} {
		_, err := parse(nil, tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
		require.NotContains(t, err.Error(), "sekrit-value", "the token is never echoed")
	}
}

// TestAdvertisedHTTPAddr: the advertised address is the flag's, or the
// bound address unless its host is a wildcard.
func TestAdvertisedHTTPAddr(t *testing.T) {
	parse := func(args ...string) httpServing {
		t.Helper()
		o, err := parseRunOptions(append([]string{"--brokers", "k:9092"}, args...), &env{})
		require.NoError(t, err)
		return o.serving
	}
	require.Equal(t, "127.0.0.1:9100", parse("--http-addr", ":9100").advertise("127.0.0.1:9100"))
	require.Equal(t, "", parse("--http-addr", "0.0.0.0:9100").advertise("0.0.0.0:9100"))
	require.Equal(t, "", parse("--http-addr", "[::]:9100").advertise("[::]:9100"))
	require.Equal(t, "pod-1.svc:9100", parse("--http-addr", "0.0.0.0:9100", "--advertised-http-addr", "pod-1.svc:9100").advertise("0.0.0.0:9100"))
}

// TestServeHTTPMutualTLS serves the live view over HTTPS with client CAs:
// a client with a certificate from them reads the JSON; one without gets
// /metrics and /healthz but 401 from the live view. The log names the
// address (internal/chaos reads it) and what the live view requires.
func TestServeHTTPMutualTLS(t *testing.T) {
	certs, err := testcerts.Generate(t.TempDir())
	require.NoError(t, err)
	o, err := parseRunOptions([]string{"--brokers", "k:9092", "--http-addr", ":0", "--http-tls-cert-file", certs.ServerCertFile,
		"--http-tls-key-file", certs.ServerKeyFile, "--http-tls-client-ca-file", certs.CAFile}, &env{})
	require.NoError(t, err)
	stats := func() []chain.PartitionStats {
		return []chain.PartitionStats{{Topic: "events", Partition: 0, Stages: []chain.StageStats{{Name: "click", Mode: "buffered"}}}}
	}
	health := &metricshttp.Health{Stats: stats, StallTimeout: time.Minute}
	var logs testutil.SyncBuffer
	addrs := make(chan string, 1)
	stop, err := serveHTTP(httpServer{httpServing: o.serving, reg: metrics.NewRegistry(), health: health,
		view: liveview.New(liveview.Config{Stats: stats})}, newLogger(&logs, "json", "info"), func(a string) { addrs <- a })
	require.NoError(t, err)
	defer stop()
	addr := recv(t, addrs, "the HTTP server")
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)
	require.Contains(t, logs.String(), `"msg":"serving /metrics and /healthz`, "the words internal/chaos looks for")
	require.Contains(t, logs.String(), `"addr":"`+addr+`"`)
	require.Contains(t, logs.String(), `"live_view_auth":"client certificate"`)
	require.NotContains(t, logs.String(), "open to every machine")

	client := func(withCert bool) *http.Client {
		pem, err := os.ReadFile(certs.CAFile)
		require.NoError(t, err)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(pem))
		c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if withCert {
			kp, err := tls.LoadX509KeyPair(certs.ClientCertFile, certs.ClientKeyFile)
			require.NoError(t, err)
			c.Certificates = []tls.Certificate{kp}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
	}
	status := func(c *http.Client, path string) int {
		resp, err := c.Get("https://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	with, without := client(true), client(false)
	require.Equal(t, http.StatusOK, status(with, liveview.APIPath))
	require.Equal(t, http.StatusOK, status(with, "/"))
	require.Equal(t, http.StatusUnauthorized, status(without, liveview.APIPath))
	require.Equal(t, http.StatusUnauthorized, status(without, "/"))
	require.Equal(t, http.StatusOK, status(without, "/metrics"))
	require.Equal(t, http.StatusOK, status(without, "/healthz"))
}

// TestServeHTTPWarnsWhenOpen: a live view served to every interface with
// no token and no client certificate is logged as a warning.
func TestServeHTTPWarnsWhenOpen(t *testing.T) {
	stats := func() []chain.PartitionStats { return nil }
	var logs testutil.SyncBuffer
	stop, err := serveHTTP(httpServer{httpServing: httpServing{addr: "0.0.0.0:0", guard: httpauth.New("", false)}, reg: metrics.NewRegistry(),
		health: &metricshttp.Health{Stats: stats}, view: liveview.New(liveview.Config{Stats: stats})}, newLogger(&logs, "json", "info"), nil)
	require.NoError(t, err)
	stop()
	require.Contains(t, logs.String(), "the live view is open to every machine")
	require.Contains(t, logs.String(), `"live_view_auth":"none (open)"`)
}
