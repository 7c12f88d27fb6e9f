package provenance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
)

func manifest() *artifacts.Manifest {
	return &artifacts.Manifest{
		Reproducible: artifacts.Reproducible{
			Request: artifacts.Request{Kind: "code", Language: "python", Argv: []string{"python3", "/code/main.py"}, Network: "none"},
			Image:   "sandboxd/python", ImageDigest: "sha256:" + strings.Repeat("ab", 32), ImageRecipe: "sha256:" + strings.Repeat("cd", 32),
			Runtime: artifacts.Runtime{Name: "runc", Version: "1.1.5"}, Backend: "docker", Seccomp: "sha256:" + strings.Repeat("ef", 32),
			Outcome: artifacts.Outcome{Status: "OK", StdoutTotal: 3},
		},
		Run: artifacts.Run{RunID: "run-1", Instance: "default", Version: "test", StartedAt: time.Unix(1700000000, 0).UTC(),
			Session: &artifacts.Session{ID: "s1", Seq: 2, ParentBundle: "sha256:" + strings.Repeat("01", 32)}},
	}
}

// store writes one signed bundle with ring and returns the store's folder
// and the bundle's digest.
func store(t *testing.T, ring *Keyring) (*artifacts.Store, string) {
	t.Helper()
	s, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	s.SignWith(ring)
	digest, _, err := s.Write(manifest(), []artifacts.Source{artifacts.BytesSource("stdout", []byte("42\n"), false)})
	if err != nil {
		t.Fatal(err)
	}
	return s, digest
}

// TestSignedBundleVerifiesElsewhereWithThePublicKeyAlone is the issue's
// test: the bundle and its signature copied to another folder, checked
// with only the public key; a tampered payload and a foreign key refused.
func TestSignedBundleVerifiesElsewhereWithThePublicKeyAlone(t *testing.T) {
	ringDir := t.TempDir()
	ring, err := Open(ringDir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(ringDir, keyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v, %v", st, err)
	}
	s, digest := store(t, ring)
	att, err := s.Attestation(digest)
	if err != nil || att == nil {
		t.Fatalf("attestation = %q, %v", att, err)
	}
	// Elsewhere: the bundle's bytes, its signature and the public key.
	elsewhere := t.TempDir()
	rc, err := s.Open(digest)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := io.ReadAll(rc)
	rc.Close()
	os.WriteFile(filepath.Join(elsewhere, "b.tar.zst"), bundle, 0o644)
	os.WriteFile(filepath.Join(elsewhere, "b.tar.zst"+artifacts.AttestationSuffix), att, 0o644)
	os.WriteFile(filepath.Join(elsewhere, "key.pem"), []byte(ring.PublicKeys()[0]), 0o644)

	pemKey, _ := os.ReadFile(filepath.Join(elsewhere, "key.pem"))
	pub, err := ParsePublic(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err := artifacts.Verify(bytes.NewReader(bundle), digest, artifacts.DefaultReadLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := os.ReadFile(filepath.Join(elsewhere, "b.tar.zst"+artifacts.AttestationSuffix))
	run, err := Verify(env, pub, b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	want := RunOf(&b.Manifest)
	if run.Image != want.Image || run.Seccomp != want.Seccomp || run.Request != want.Request || run.Result.Status != "OK" ||
		run.Session == nil || run.Session.ParentBundle != want.Session.ParentBundle || !strings.HasPrefix(run.Request, "sha256:") {
		t.Fatalf("signed run = %+v, want %+v", run, want)
	}

	// A payload changed after signing: the signature no longer holds.
	var e map[string]any
	json.Unmarshal(env, &e)
	payload, _ := base64.StdEncoding.DecodeString(e["payload"].(string))
	e["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(payload, []byte(`"OK"`), []byte(`"NO"`), 1))
	tampered, _ := json.Marshal(e)
	if _, err := Verify(tampered, pub, digest); err == nil || !strings.Contains(err.Error(), "not signed by key") {
		t.Errorf("tampered payload: err = %v", err)
	}
	// Another daemon's key.
	other, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := ParsePublic([]byte(other.PublicKeys()[0]))
	if _, err := Verify(env, foreign, digest); err == nil || !strings.Contains(err.Error(), "not signed by key") {
		t.Errorf("foreign key: err = %v", err)
	}
	// The signature of another bundle.
	if _, err := Verify(env, pub, "sha256:"+strings.Repeat("00", 32)); err == nil || !strings.Contains(err.Error(), "another bundle") {
		t.Errorf("another bundle: err = %v", err)
	}
	if _, err := Verify([]byte("not json"), pub, digest); err == nil {
		t.Error("a file that is no envelope verified")
	}
}

// TestRotationKeepsOldKeysVerifiable: after a rotation, new bundles are
// signed by the new key, the old public key stays in the ring and still
// verifies what it signed, and a reopened ring uses the new key.
func TestRotationKeepsOldKeysVerifiable(t *testing.T) {
	dir := t.TempDir()
	ring, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	oldID, oldPEM := ring.KeyID(), ring.PublicKeys()[0]
	s, digest := store(t, ring)
	oldAtt, _ := s.Attestation(digest)

	// Another process rotates; the daemon reloads.
	other, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Rotate(); err != nil {
		t.Fatal(err)
	}
	if err := ring.Reload(); err != nil {
		t.Fatal(err)
	}
	keys := ring.PublicKeys()
	if ring.KeyID() == oldID || len(keys) != 2 || keys[1] != oldPEM {
		t.Fatalf("after rotation: id %s (was %s), keys %d", ring.KeyID(), oldID, len(keys))
	}
	oldPub, _ := ParsePublic([]byte(oldPEM))
	if _, err := Verify(oldAtt, oldPub, digest); err != nil {
		t.Errorf("the old key no longer verifies what it signed: %v", err)
	}
	s2, digest2 := store(t, ring)
	newAtt, _ := s2.Attestation(digest2)
	newPub, _ := ParsePublic([]byte(keys[0]))
	if _, err := Verify(newAtt, newPub, digest2); err != nil {
		t.Errorf("the new key: %v", err)
	}
	if _, err := Verify(newAtt, oldPub, digest2); err == nil {
		t.Error("the old key verified a bundle the new one signed")
	}
	if reopened, err := Open(dir); err != nil || reopened.KeyID() != ring.KeyID() {
		t.Errorf("reopened ring: %v, %v", reopened, err)
	}
}

func TestUnsignedStoreHasNoAttestation(t *testing.T) {
	s, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	digest, _, err := s.Write(manifest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if att, err := s.Attestation(digest); att != nil || err != nil {
		t.Fatalf("attestation = %q, %v", att, err)
	}
}
