// Package tlsconf makes the TLS configurations of sandboxd's listeners and
// clients from files, and names the client a verified certificate
// belongs to.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files name what a TLS endpoint needs: its certificate and key, and
// for mutual TLS the CA its clients' certificates must chain to. A client
// names the CA its server's certificate must chain to, and its own
// certificate and key when the server asks for one.
type Files struct {
	CertFile, KeyFile string
	CAFile            string
}

// ServerConfig is the TLS configuration of a listener: TLS 1.2 at least,
// and with a CA, a client certificate that chains to it required of every
// client.
func (f Files) ServerConfig() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("a TLS listener needs a certificate and its key")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("the TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		if cfg.ClientCAs, err = certPool(f.CAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig is the TLS configuration of a client: the server must show
// a certificate that chains to the CA (or to the host's roots without
// one), and the client shows its own when it has one.
func (f Files) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pool, err := certPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("the client's TLS certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func certPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("the TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the TLS CA %s holds no PEM certificate", file)
	}
	return pool, nil
}

// CertName is the common name of a connection's verified client
// certificate, or "".
func CertName(st tls.ConnectionState) string {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return ""
	}
	return st.VerifiedChains[0][0].Subject.CommonName
}
