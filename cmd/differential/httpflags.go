package main

import (
	"crypto/tls"
	"flag"
	"net"
	"os"
	"strings"

	"github.com/differential-dev/differential/internal/httpauth"
	"github.com/differential-dev/differential/kafka"
)

// httpFlags are the settings of run's HTTP server (the live view, /state,
// /metrics, /healthz): its address and who may see the live view.
type httpFlags struct {
	addr      string
	token     kafka.Secret
	tokenFile string
	tls       httpauth.TLSFiles
	// advertised is --advertised-http-addr.
	advertised string
}

func (h *httpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.addr, "http-addr", h.addr, "serve the live view (/), its JSON (/api/v1/chain), state queries (/state/{key}), /metrics (Prometheus) and /healthz on this `host:port`; without a host (:9100) on 127.0.0.1 only: name the host, or 0.0.0.0, to serve other machines; empty: off")
	fs.Var(secretValue{&h.token}, "http-token", "bearer `token` the live view, its JSON and /state require (as Authorization: Bearer, or as a browser's Basic password); /metrics and /healthz stay open; prefer $DIFFERENTIAL_HTTP_TOKEN or --http-token-file: a command line is visible to other users")
	fs.StringVar(&h.tokenFile, "http-token-file", "", "`file` holding the --http-token (one line)")
	fs.StringVar(&h.tls.CertFile, "http-tls-cert-file", "", "serve HTTPS with this certificate chain, a PEM `file` (with --http-tls-key-file)")
	fs.StringVar(&h.tls.KeyFile, "http-tls-key-file", "", "the HTTPS certificate's private key, a PEM `file`")
	fs.StringVar(&h.tls.ClientCAFile, "http-tls-client-ca-file", "", "PEM `file` of CAs: a client certificate that chains to one of them may see the live view and query /state (mutual TLS; with --http-tls-cert-file); /metrics and /healthz ask for none")
}

// registerAdvertised registers --advertised-http-addr (run's: a member of
// a group).
func (h *httpFlags) registerAdvertised(fs *flag.FlagSet) {
	fs.StringVar(&h.advertised, "advertised-http-addr", "", "the `host:port` other members of the group redirect a state query (/state/{key}) to when this member owns the key's partition, advertised through the consumer group; default: the --http-addr, unless its host is a wildcard (0.0.0.0, ::), which cannot be advertised")
}

// httpServing is what the validated flags describe.
type httpServing struct {
	addr string // where to listen, a host always named ("" = off)
	// advertised is --advertised-http-addr ("": the bound address, unless
	// its host is a wildcard).
	advertised string
	guard      *httpauth.Guard
	tls        *tls.Config // nil: plain HTTP
}

// serving validates the flags (errors name them), with alias the value of
// --metrics-addr (another name for --http-addr), and reads the files.
func (h *httpFlags) serving(alias string) (httpServing, error) {
	addr := h.addr
	switch {
	case addr == "":
		addr = alias
	case alias != "" && alias != addr:
		return httpServing{}, usagef("--http-addr %q and --metrics-addr %q name two addresses for the one HTTP server: set one", addr, alias)
	}
	token := h.token
	if h.tokenFile != "" {
		if token != "" {
			return httpServing{}, usagef("--http-token and --http-token-file are two ways to give one token: set one")
		}
		b, err := os.ReadFile(h.tokenFile)
		if err != nil {
			return httpServing{}, usagef("--http-token-file: %w", err)
		}
		if token = kafka.Secret(strings.TrimRight(string(b), "\r\n")); token == "" {
			return httpServing{}, usagef("--http-token-file %s is empty", h.tokenFile)
		}
	}
	if addr == "" {
		if token != "" || h.tls.Enabled() || h.advertised != "" {
			return httpServing{}, usagef("--http-token(-file), --http-tls-* and --advertised-http-addr are settings of the HTTP server: they need --http-addr")
		}
		return httpServing{}, nil
	}
	listen, err := listenAddr(addr)
	if err != nil {
		return httpServing{}, err
	}
	if h.advertised != "" {
		host, port, err := net.SplitHostPort(h.advertised)
		if err != nil || host == "" || port == "" || wildcard(host) {
			return httpServing{}, usagef("--advertised-http-addr: %q is not a host:port other members can reach (name the host; not 0.0.0.0 or ::)", h.advertised)
		}
	}
	s := httpServing{addr: listen, advertised: h.advertised, guard: httpauth.New(string(token), h.tls.ClientCAFile != "")}
	if h.tls.Enabled() {
		if h.tls.CertFile == "" || h.tls.KeyFile == "" {
			return httpServing{}, usagef("--http-tls-cert-file and --http-tls-key-file go together, and --http-tls-client-ca-file needs them (mutual TLS is TLS)")
		}
		if s.tls, err = httpauth.ServerTLS(h.tls); err != nil {
			return httpServing{}, usagef("--http-tls-*: %w", err)
		}
	}
	return s, nil
}

// listenAddr is the address to listen on for the host:port addr: a missing
// host is the loopback address, so only this machine can connect unless
// the operator names a host.
func listenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", usagef("--http-addr: %q is not host:port (e.g. :9100 for 127.0.0.1:9100, 0.0.0.0:9100 for every interface)", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// loopback reports whether the bound address bound accepts connections
// from this machine only.
func loopback(bound string) bool {
	host, _, err := net.SplitHostPort(bound)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// wildcard reports whether host is an address that listens on every
// interface (and names none of them).
func wildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// advertise is the address the member advertises for the bound address
// bound: --advertised-http-addr, or bound unless its host is a wildcard
// ("": none).
func (s httpServing) advertise(bound string) string {
	if s.advertised != "" {
		return s.advertised
	}
	if host, _, err := net.SplitHostPort(bound); err != nil || wildcard(host) {
		return ""
	}
	return bound
}
