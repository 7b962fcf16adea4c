package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is one generated CA with its server and client certificates.
type Set struct {
	Dir string
	// CAFile is the CA certificate (PEM): what a client trusts.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate chain
	// and PKCS#8 key; ServerPEMFile is both in one file (key first), the
	// layout of Kafka's PEM keystore.
	ServerCertFile, ServerKeyFile, ServerPEMFile string
	// ClientCertFile and ClientKeyFile are a client certificate (CN
	// "client") and its key, for mutual TLS.
	ClientCertFile, ClientKeyFile string
	// Server is the server's certificate for a Go TLS listener.
	Server tls.Certificate
}

// ServerTLS is a Go server configuration presenting the server certificate.
func (s *Set) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.Server}, MinVersion: tls.VersionTLS12}
}

// Generate writes a new CA and its certificates into dir (created if
// missing) and returns their paths.
func Generate(dir string) (*Set, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "differential test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	s := &Set{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ServerPEMFile:  filepath.Join(dir, "server.pem"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	if err := os.WriteFile(s.CAFile, pemBlock("CERTIFICATE", caDER), 0o600); err != nil {
		return nil, err
	}
	leaf := func(cn string, usage x509.ExtKeyUsage, server bool) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", pkcs8), nil
	}
	srvCert, srvKey, err := leaf("localhost", x509.ExtKeyUsageServerAuth, true)
	if err != nil {
		return nil, err
	}
	cliCert, cliKey, err := leaf("client", x509.ExtKeyUsageClientAuth, false)
	if err != nil {
		return nil, err
	}
	chain := append(append([]byte{}, srvCert...), pemBlock("CERTIFICATE", caDER)...)
	for path, data := range map[string][]byte{
		s.ServerCertFile: chain,
		s.ServerKeyFile:  srvKey,
		s.ServerPEMFile:  append(append([]byte{}, srvKey...), chain...),
		s.ClientCertFile: cliCert,
		s.ClientKeyFile:  cliKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	s.Server, err = tls.X509KeyPair(chain, srvKey)
	if err != nil {
		return nil, fmt.Errorf("testcerts: server key pair: %w", err)
	}
	return s, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
