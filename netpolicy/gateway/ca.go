package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// sandboxCA is the certificate authority of one container: the gateway
// issues with it the certificates of the hosts whose TLS it terminates to
// add a secret, and only that container trusts it. Its key is kept in the
// gateway's memory alone, never written.
type sandboxCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// leafKey is the key of every certificate it issues: a host's
	// certificate then costs one signature.
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// caLifetime bounds a container's CA and its certificates: longer than
// any session lives.
const caLifetime = 30 * 24 * time.Hour

func newSandboxCA(instance string, addr netip.Addr) (*sandboxCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"sandboxd"}, CommonName: fmt.Sprintf("sandboxd %s egress CA for %s", instance, addr)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &sandboxCA{cert: cert, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// pem is the CA's certificate, for the container's trust store.
func (ca *sandboxCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// leaf is the certificate of host, issued once.
func (ca *sandboxCA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey}
	ca.leaves[host] = c
	return c, nil
}

// SystemBundle is the host's bundle of trusted certificates (Debian's
// ca-certificates), which a container's trust store holds besides its CA.
const SystemBundle = "/etc/ssl/certs/ca-certificates.crt"

// trustDir holds the trust stores of the containers.
func (g *Gateway) trustDir() string { return filepath.Join(g.cfg.RunDir, g.cfg.Instance, "trust") }

// TrustBundle is the host file bound at the container of addr's system
// bundle of trusted certificates: the system's and its CA's; "" when the
// gateway adds no secrets and so terminates no TLS.
func (g *Gateway) TrustBundle(addr netip.Addr) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cas[addr] == nil {
		return ""
	}
	return filepath.Join(g.trustDir(), addr.String()+".pem")
}

// Terminates says whether the gateway may terminate TLS to add secrets:
// every allow-listed container then trusts a CA of its own.
func (g *Gateway) Terminates() bool { return g.cfg.Secrets != nil }

// makeCA makes addr's CA and writes its trust store.
func (g *Gateway) makeCA(addr netip.Addr) error {
	ca, err := newSandboxCA(g.cfg.Instance, addr)
	if err != nil {
		return fmt.Errorf("egress CA for %s: %w", addr, err)
	}
	system, err := g.systemBundle()
	if err != nil {
		return fmt.Errorf("egress CA for %s: %w", addr, err)
	}
	if err := os.MkdirAll(g.trustDir(), 0o755); err != nil {
		return err
	}
	path := filepath.Join(g.trustDir(), addr.String()+".pem")
	if err := os.WriteFile(path, append(slices.Clip(system), ca.pem()...), 0o644); err != nil {
		return fmt.Errorf("egress CA for %s: %w", addr, err)
	}
	g.mu.Lock()
	g.cas[addr] = ca
	g.mu.Unlock()
	return nil
}

// systemBundle is the system's certificates, ending in a newline, read
// once: every allow-listed container's trust store begins with them, and
// a container is made for each task.
func (g *Gateway) systemBundle() ([]byte, error) {
	g.system.once.Do(func() {
		b, err := os.ReadFile(g.cfg.SystemBundle)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			g.system.err = err
			return
		}
		if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
			b = append(b, '\n')
		}
		g.system.pem = b
	})
	return g.system.pem, g.system.err
}

// dropCA forgets addr's CA and removes its trust store.
func (g *Gateway) dropCA(addr netip.Addr) error {
	g.mu.Lock()
	_, had := g.cas[addr]
	delete(g.cas, addr)
	g.mu.Unlock()
	if !had {
		return nil
	}
	if err := os.Remove(filepath.Join(g.trustDir(), addr.String()+".pem")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (g *Gateway) caOf(addr netip.Addr) *sandboxCA {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cas[addr]
}

// Placeholders are the program's variables of the secrets names: each
// secret's SANDBOXD_SECRET_<NAME> and its program_env, set to its
// placeholder.
func (g *Gateway) Placeholders(names []string) map[string]string {
	vars := map[string]string{}
	for _, n := range names {
		p := netpolicy.Placeholder(n)
		vars[p] = p
		if sec, ok := g.cfg.Secrets.Get(n); ok && sec.ProgramEnv != "" {
			vars[sec.ProgramEnv] = p
		}
	}
	return vars
}
