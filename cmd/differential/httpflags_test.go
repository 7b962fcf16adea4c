package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testcerts"
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
	} {
		_, err := parse(nil, tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
		require.NotContains(t, err.Error(), "sekrit-value", "the token is never echoed")
	}
}
