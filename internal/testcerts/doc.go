// Package testcerts makes throwaway TLS material for the tests of secured
// clusters: a CA, a server certificate for 127.0.0.1 and localhost signed by
// it, and a client certificate, written as PEM files into a directory the
// caller owns (a test's temporary directory). Nothing is ever checked in.
//
// The files follow what scripts/kafka.sh's SASL_SSL listener reads
// (ssl.keystore.type=PEM, ssl.truststore.type=PEM): server.pem holds the
// server's unencrypted PKCS#8 key followed by its certificate chain, ca.pem
// the CA certificate. Keys are ECDSA P-256; certificates are valid from an
// hour ago for a day. Generate is safe for concurrent use.
package testcerts
