// Package httpauth guards the HTTP routes of a running engine that show
// more than its metrics (the live view and its JSON; the state queries):
// a request gets through with the bearer token the operator configured, or
// with a client certificate the server's TLS verified against the client
// CAs (mutual TLS), and is refused with 401 otherwise. A Guard with neither
// configured lets everything through: the server then relies on its
// address (the engine binds to 127.0.0.1 unless told otherwise).
//
// The token is compared in constant time: both sides are hashed with
// SHA-256 first, so neither the token's bytes nor its length show in how
// long a refusal takes. A browser, which cannot add a header to a page it
// navigates to, may send the token as the password of HTTP Basic
// authentication (any user name): a refusal asks for it with a Basic
// challenge, so the browser prompts once and sends it again with the
// page's own requests.
//
// ServerTLS builds the server's tls.Config from PEM files. It asks for a
// client certificate but does not require one at the handshake
// (VerifyClientCertIfGiven): the routes a Guard does not wrap (/metrics,
// the probes) stay open to a scraper without one, and the Guard decides
// per route.
//
// A Guard is immutable after New and safe for concurrent use.
package httpauth
