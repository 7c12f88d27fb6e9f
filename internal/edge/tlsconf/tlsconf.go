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
	"sync/atomic"
	"time"
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

// Reloadable is a listener's TLS configuration whose certificate, key and
// client CA Reload reads again from their files: a certificate rotated on
// disk is taken up by a SIGHUP, without a restart. Connections made before
// keep what they negotiated; streams on them go on.
type Reloadable struct {
	files Files
	// optionalClientCert verifies a client certificate only when one is
	// given (callers by token need none).
	optionalClientCert bool
	cur                atomic.Pointer[tls.Config]
}

// NewReloadable reads f once; an error names what is wrong with it.
func NewReloadable(f Files, optionalClientCert bool) (*Reloadable, error) {
	r := &Reloadable{files: f, optionalClientCert: optionalClientCert}
	return r, r.Reload()
}

// Reload reads the files again and, when they make a configuration, uses
// it for the connections to come; otherwise the one before stays.
func (r *Reloadable) Reload() error {
	cfg, err := r.files.ServerConfig()
	if err != nil {
		return err
	}
	if r.optionalClientCert && cfg.ClientAuth == tls.RequireAndVerifyClientCert {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	r.cur.Store(cfg)
	return nil
}

// NotAfter is when the certificate in use expires.
func (r *Reloadable) NotAfter() time.Time {
	if certs := r.cur.Load().Certificates; len(certs) > 0 && certs[0].Leaf != nil {
		return certs[0].Leaf.NotAfter
	}
	return time.Time{}
}

// Config is the configuration to serve with: each handshake takes the
// newest one read, offering protos by ALPN (gRPC needs "h2").
func (r *Reloadable) Config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := r.cur.Load().Clone()
			c.NextProtos = protos
			return c, nil
		},
	}
}
