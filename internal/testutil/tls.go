package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCA is a certificate authority a test makes for itself, in PEM files
// under a temporary folder.
type TestCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA's certificate.
	File string
}

// NewTestCA makes a CA named name.
func NewTestCA(t *testing.T, name string) *TestCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &TestCA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.File = ca.write(name+".pem", "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for loopback (127.0.0.1, ::1 and
// localhost) and returns its certificate and key files.
func (ca *TestCA) Server(name string) (certFile, keyFile string) {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
}

// Host issues a server certificate for the DNS name name (a test host's)
// and returns its certificate and key files.
func (ca *TestCA) Host(name string) (certFile, keyFile string) {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, nil, []string{name})
}

// Client issues a client certificate of common name name.
func (ca *TestCA) Client(name string) (certFile, keyFile string) {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *TestCA) issue(name string, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (string, string) {
	ca.t.Helper()
	key := newKey(ca.t)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return ca.write(name+".pem", "CERTIFICATE", der), ca.write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

func (ca *TestCA) write(name, kind string, der []byte) string {
	ca.t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
