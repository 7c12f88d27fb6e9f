//go:build integration

package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// TestSecretsThroughTheDaemon is credential injection as an operator sets
// it up: --egress-secrets names a key in a file for api.openai.internal,
// --egress-ca-file trusts the test host's CA; a run that asks for the
// secret calls the host with the placeholder it holds, the host gets the
// key, the program sees its echo masked; a key rotated in its file is used
// from the next run, read again without a restart; a run that does not ask
// for it is spliced and gets nothing; one that names a secret the
// operator lacks is refused before anything starts.
func TestSecretsThroughTheDaemon(t *testing.T) {
	requireDocker(t)
	host := testutil.NewHost(t)
	ca := testutil.NewTestCA(t, "sandboxd e2e upstream CA")
	certFile, keyFile := ca.Host("api.openai.internal")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	saw := &testutil.Buffer{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(saw, "%s %s\n", r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintf(w, `{"object": "list", "you_sent": %q}`, r.Header.Get("Authorization"))
	})}
	go srv.Serve(tls.NewListener(host.Listen(t, 443), &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	keyPath := filepath.Join(dir, "openai.key")
	os.WriteFile(keyPath, []byte("sk-e2e-first-0123456789\n"), 0o600)
	secrets := filepath.Join(dir, "secrets.json")
	os.WriteFile(secrets, []byte(`{"secrets": [{"name": "openai", "file": "`+keyPath+`", "hosts": ["api.openai.internal"], "paths": ["/v1/"],
		"headers": {"Authorization": "Bearer {secret}"}, "program_env": "OPENAI_API_KEY"}]}`), 0o600)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--egress-allow", "api.openai.internal:443",
		"--egress-host", "api.openai.internal="+host.Addr.String(), "--egress-secrets", secrets, "--egress-ca-file", ca.File)

	code := `import os, urllib.request
key = os.environ["OPENAI_API_KEY"]
print("the program holds", key)
req = urllib.request.Request("https://api.openai.internal/v1/models", headers={"Authorization": "Bearer " + key})
print(urllib.request.urlopen(req, timeout=10).read().decode())`
	stdout, stderr, exit := runCLI(t, d, "--allow-host", "api.openai.internal:443", "--secret", "openai", "--lang", "python", "-c", code)
	masked := "Bearer " + strings.Repeat("*", len("sk-e2e-first-0123456789"))
	if exit != 0 || !strings.Contains(stdout, "the program holds SANDBOXD_SECRET_OPENAI") || !strings.Contains(stdout, masked) || strings.Contains(stdout, "sk-e2e") {
		t.Fatalf("a run with the secret: exit %d, stdout %q, stderr %q\n%s", exit, stdout, stderr, d.log)
	}
	t.Logf("sandboxd run --secret openai:\n%s%s", stdout, stderr)
	bundleFile := filepath.Join(dir, "run.sbx")
	digest := strings.TrimSpace(stderr[strings.LastIndex(stderr, "bundle ")+len("bundle "):])
	if out, code := cli(t, "bundle", "get", digest, "-o", bundleFile, "--socket", d.socket); code != 0 {
		t.Fatalf("sandboxd bundle get: %s", out)
	}
	inspected, _ := cli(t, "inspect", bundleFile)
	if !strings.Contains(inspected, "secrets added by the gateway: openai") || !strings.Contains(inspected, "; openai added to 1 requests, masked in 1 places of the responses") ||
		strings.Contains(inspected, "sk-e2e") {
		t.Errorf("sandboxd inspect:\n%s", inspected)
	}
	t.Logf("sandboxd inspect:\n%s", inspected)

	os.WriteFile(keyPath, []byte("sk-e2e-rotated-987654321\n"), 0o600)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(d.log.String(), "secrets reloaded") })
	if _, _, exit := runCLI(t, d, "--allow-host", "api.openai.internal:443", "--secret", "openai", "--lang", "python", "-c", code); exit != 0 {
		t.Fatalf("a run after the rotation: exit %d", exit)
	}
	plain := `import ssl, urllib.request
ctx = ssl.create_default_context()
print(urllib.request.urlopen(urllib.request.Request("https://api.openai.internal/v1/models", headers={"Authorization": "Bearer none"}), timeout=10, context=ctx).read().decode())`
	if stdout, stderr, exit := runCLI(t, d, "--allow-host", "api.openai.internal:443", "--lang", "python", "-c", plain); exit == 0 || !strings.Contains(stderr+stdout, "CERTIFICATE_VERIFY_FAILED") {
		// Spliced: the host's own certificate, of a CA the container
		// does not trust.
		t.Errorf("a run without the secret: exit %d, %q %q", exit, stdout, stderr)
	}
	want := "/v1/models Bearer sk-e2e-first-0123456789\n/v1/models Bearer sk-e2e-rotated-987654321\n"
	if got := saw.String(); got != want {
		t.Errorf("the host saw %q, want %q", got, want)
	}
	if _, stderr, exit := runCLI(t, d, "--allow-host", "api.openai.internal:443", "--secret", "stripe", "--lang", "python", "-c", "print(1)"); exit == 0 ||
		!strings.Contains(stderr, `network.secrets[0]: "stripe" is not a secret of the operator's (["openai"])`) {
		t.Errorf("a secret the operator lacks: exit %d, %q", exit, stderr)
	}
}
