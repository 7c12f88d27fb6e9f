package tlsconf

import (
	"crypto/tls"
	"net"
	"os"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// handshake connects a client trusting caFile to a server on cfg and
// returns the issuer of the certificate the server showed.
func handshake(t *testing.T, cfg *tls.Config, caFile string) (string, error) {
	t.Helper()
	pool, err := certPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	// Loopback TCP, not net.Pipe: a TLS 1.3 server writes its session
	// tickets after the client's handshake ended, into a pipe nobody reads.
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if s, err := lis.Accept(); err == nil {
			s.(*tls.Conn).Handshake()
			s.Close()
		}
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err := client.Handshake(); err != nil {
		return "", err
	}
	st := client.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN gave %q, want h2: gRPC needs it", st.NegotiatedProtocol)
	}
	return st.PeerCertificates[0].Issuer.CommonName, nil
}

// TestReloadableTakesTheNewCertificate: after the files change, Reload
// makes the next handshake show the new certificate; files that do not
// make a configuration leave the one before.
func TestReloadableTakesTheNewCertificate(t *testing.T) {
	one, two := testutil.NewTestCA(t, "ca-one"), testutil.NewTestCA(t, "ca-two")
	cert1, key1 := one.Server("sandboxd")
	cert2, key2 := two.Server("sandboxd")
	r, err := NewReloadable(Files{CertFile: cert1, KeyFile: key1}, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config("h2")
	if issuer, err := handshake(t, cfg, one.File); err != nil || issuer != "ca-one" {
		t.Fatalf("before: %q, %v", issuer, err)
	}
	if r.NotAfter().IsZero() {
		t.Error("NotAfter of the certificate in use is unknown")
	}
	copyFile(t, cert2, cert1)
	copyFile(t, key2, key1)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if issuer, err := handshake(t, cfg, two.File); err != nil || issuer != "ca-two" {
		t.Fatalf("after the reload: %q, %v", issuer, err)
	}
	if _, err := handshake(t, cfg, one.File); err == nil {
		t.Fatal("the old CA still verifies the new certificate")
	}
	os.WriteFile(key1, []byte("not a key"), 0o600)
	if err := r.Reload(); err == nil {
		t.Fatal("a broken key was taken")
	}
	if issuer, err := handshake(t, cfg, two.File); err != nil || issuer != "ca-two" {
		t.Fatalf("after a failed reload: %q, %v; want the certificate before", issuer, err)
	}
}

// TestReloadableOptionalClientCert: with callers by token, a client
// certificate is verified when given and not required.
func TestReloadableOptionalClientCert(t *testing.T) {
	ca := testutil.NewTestCA(t, "ca")
	cert, key := ca.Server("sandboxd")
	for _, optional := range []bool{false, true} {
		r, err := NewReloadable(Files{CertFile: cert, KeyFile: key, CAFile: ca.File}, optional)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]tls.ClientAuthType{false: tls.RequireAndVerifyClientCert, true: tls.VerifyClientCertIfGiven}[optional]
		got, _ := r.Config().GetConfigForClient(nil)
		if got.ClientAuth != want || got.ClientCAs == nil {
			t.Errorf("optional %v: client auth %v, want %v with the CA", optional, got.ClientAuth, want)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}
