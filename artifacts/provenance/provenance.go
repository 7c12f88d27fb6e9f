// Package provenance signs what ran: each bundle's digest, with the image
// and recipe digests, the runtime and its version, the seccomp profile, the
// request's hash and the result, as an in-toto statement in a DSSE envelope
// signed by the daemon's ed25519 key. A reviewer elsewhere checks it with
// the public key alone.
package provenance

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/moby/sys/atomicwriter"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sandboxd/sandboxd/artifacts"
)

// PayloadType is the DSSE payload type of the statements.
const PayloadType = "application/vnd.in-toto+json"

// PredicateType names what the statement says about the bundle: a run of
// sandboxd.
const PredicateType = "urn:sandboxd:provenance:run:v1"

// Run is the statement's predicate.
type Run struct {
	RunID   string `json:"run_id"`
	Kind    string `json:"kind"`
	Image   Image  `json:"image"`
	Runtime string `json:"runtime"`
	// RuntimeVersion is the OCI runtime's version, Backend the backend (docker, containerd).
	RuntimeVersion string `json:"runtime_version"`
	Backend        string `json:"backend"`
	Seccomp        string `json:"seccomp,omitempty"`
	// Request is the SHA-256 of the effective request as the bundle
	// records it (its canonical JSON).
	Request string             `json:"request"`
	Result  artifacts.Outcome  `json:"result"`
	Session *artifacts.Session `json:"session,omitempty"`
	// Replay, in a replay, names the bundle whose record answered its
	// tool calls, and each call it answered: the statement attests to no
	// call a tool made that a record made instead.
	Replay *artifacts.Replay `json:"replay,omitempty"`
	Daemon string            `json:"daemon"`
}

// Image is the image a run ran on.
type Image struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Recipe string `json:"recipe,omitempty"`
}

// Keyring is a daemon's signing key and the public halves of every key it
// signed with before (rotation keeps them verifiable).
type Keyring struct {
	dir string

	mu  sync.Mutex
	key ed25519.PrivateKey
	id  string
	// public holds each key's public half as PEM, by key id: what
	// PublicKeys hands out on every inventory.
	public map[string]string
}

const (
	keyFile   = "signing.key"
	publicDir = "public"
)

// Open opens the keyring in dir, making it and a first key when there is
// none. The private key is 0600 and the folder 0700.
func Open(dir string) (*Keyring, error) {
	if err := os.MkdirAll(filepath.Join(dir, publicDir), 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	k := &Keyring{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, keyFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := k.Rotate(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := k.use(b); err != nil {
			return nil, fmt.Errorf("signing key %s: %w", filepath.Join(dir, keyFile), err)
		}
	}
	return k, k.loadPublic()
}

// use makes the PEM private key b the signing key.
func (k *Keyring) use(b []byte) error {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return errors.New("not PEM")
	}
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return err
	}
	ed, ok := priv.(ed25519.PrivateKey)
	if !ok {
		return fmt.Errorf("a %T key, not ed25519", priv)
	}
	id, err := KeyID(ed.Public())
	if err != nil {
		return err
	}
	k.key, k.id = ed, id
	return nil
}

// Reload reads the ring again: a key rotated by another process (sandboxd
// key rotate) is used from now on.
func (k *Keyring) Reload() error {
	b, err := os.ReadFile(filepath.Join(k.dir, keyFile))
	if err != nil {
		return err
	}
	k.mu.Lock()
	err = k.use(b)
	k.mu.Unlock()
	if err != nil {
		return err
	}
	return k.loadPublic()
}

// Rotate makes a new signing key; the old one's public half stays.
func (k *Keyring) Rotate() error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	id, err := KeyID(priv.Public())
	if err != nil {
		return err
	}
	pub, err := MarshalPublic(priv.Public())
	if err != nil {
		return err
	}
	// The public half first: a key is never used before it can be checked.
	if err := atomicwriter.WriteFile(filepath.Join(k.dir, publicDir, id+".pem"), pub, 0o644); err != nil {
		return err
	}
	if err := atomicwriter.WriteFile(filepath.Join(k.dir, keyFile), b, 0o600); err != nil {
		return err
	}
	k.mu.Lock()
	k.key, k.id = priv, id
	k.mu.Unlock()
	return k.loadPublic()
}

func (k *Keyring) loadPublic() error {
	entries, err := os.ReadDir(filepath.Join(k.dir, publicDir))
	if err != nil {
		return err
	}
	public := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(k.dir, publicDir, e.Name()))
		if err != nil {
			return err
		}
		pub, err := ParsePublic(b)
		if err != nil {
			return fmt.Errorf("public key %s: %w", e.Name(), err)
		}
		id, _ := KeyID(pub)
		public[id] = string(b)
	}
	k.mu.Lock()
	k.public = public
	k.mu.Unlock()
	return nil
}

// KeyID is the current key's id: the SHA-256 of its public half (PKIX).
func (k *Keyring) KeyID() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.id
}

// PublicKeys are the PEM public keys of every key of the ring, the current
// one first.
func (k *Keyring) PublicKeys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := slices.Collect(maps.Keys(k.public))
	slices.SortFunc(ids, func(a, b string) int {
		switch {
		case a == k.id:
			return -1
		case b == k.id:
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = k.public[id]
	}
	return out
}

// Sign signs the bundle m was written as, digest.
func (k *Keyring) Sign(m *artifacts.Manifest, digest string) ([]byte, error) {
	st, err := Statement(m, digest)
	if err != nil {
		return nil, err
	}
	payload, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	s := signer{key: k.key, id: k.id}
	k.mu.Unlock()
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(context.Background(), PayloadType, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

// Statement is the in-toto statement of the bundle m was written as.
func Statement(m *artifacts.Manifest, digest string) (*intoto.Statement, error) {
	hexDigest, err := artifacts.ParseDigest(digest)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(RunOf(m))
	if err != nil {
		return nil, err
	}
	pred := &structpb.Struct{}
	if err := protojson.Unmarshal(b, pred); err != nil {
		return nil, err
	}
	st := &intoto.Statement{
		Type:          intoto.StatementTypeUri,
		Subject:       []*intoto.ResourceDescriptor{{Name: "bundle", Digest: map[string]string{"sha256": hexDigest}}},
		PredicateType: PredicateType,
		Predicate:     pred,
	}
	return st, st.Validate()
}

// RunOf is what the statement of the bundle m was written as says.
func RunOf(m *artifacts.Manifest) Run {
	rp := m.Reproducible
	// Marshalling a Request cannot fail: it holds no channel or func.
	req, _ := json.Marshal(rp.Request)
	sum := sha256.Sum256(req)
	return Run{
		RunID: m.Run.RunID, Kind: rp.Request.Kind,
		Image:   Image{Name: rp.Image, Digest: rp.ImageDigest, Recipe: rp.ImageRecipe},
		Runtime: rp.Runtime.Name, RuntimeVersion: rp.Runtime.Version, Backend: rp.Backend, Seccomp: rp.Seccomp,
		Request: "sha256:" + hex.EncodeToString(sum[:]), Result: rp.Outcome, Session: m.Run.Session, Replay: m.Run.Replay, Daemon: m.Run.Version,
	}
}

// Verify checks that envelope is a statement about the bundle digest
// signed by pub, and returns its predicate.
func Verify(envelope []byte, pub crypto.PublicKey, digest string) (*Run, error) {
	hexDigest, err := artifacts.ParseDigest(digest)
	if err != nil {
		return nil, err
	}
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, fmt.Errorf("the attestation is not a DSSE envelope: %w", err)
	}
	if env.PayloadType != PayloadType {
		return nil, fmt.Errorf("the attestation's payload is %q, not an in-toto statement", env.PayloadType)
	}
	ed, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T key, not ed25519", pub)
	}
	id, err := KeyID(ed)
	if err != nil {
		return nil, err
	}
	ev, err := dsse.NewEnvelopeVerifier(verifier{key: ed, id: id})
	if err != nil {
		return nil, err
	}
	_, payload, err := ev.VerifyAndDecode(context.Background(), &env)
	if err != nil {
		return nil, fmt.Errorf("the attestation is not signed by key %s: %w", id, err)
	}
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("the signed statement: %w", err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("the signed statement: %w", err)
	}
	if st.GetPredicateType() != PredicateType {
		return nil, fmt.Errorf("the signed statement is about %q, not a sandboxd run", st.GetPredicateType())
	}
	if len(st.GetSubject()) != 1 || st.GetSubject()[0].GetDigest()["sha256"] != hexDigest {
		return nil, fmt.Errorf("the signed statement is about another bundle, not %s", digest)
	}
	b, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, err
	}
	var run Run
	if err := json.Unmarshal(b, &run); err != nil {
		return nil, fmt.Errorf("the signed run: %w", err)
	}
	return &run, nil
}

// KeyID is the SHA-256 of a public key's PKIX form, in hex.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// MarshalPublic is a public key as PEM (PKIX).
func MarshalPublic(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublic reads a PEM public ed25519 key.
func ParsePublic(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM public key")
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ed, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T key, not ed25519", pub)
	}
	return ed, nil
}

// signer and verifier are an ed25519 key as DSSE's library takes it.
type signer struct {
	key ed25519.PrivateKey
	id  string
}

func (s signer) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.key, data), nil
}
func (s signer) KeyID() (string, error) { return s.id, nil }

type verifier struct {
	key ed25519.PublicKey
	id  string
}

func (v verifier) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(v.key, data, sig) {
		return errors.New("bad signature")
	}
	return nil
}
func (v verifier) KeyID() (string, error)   { return v.id, nil }
func (v verifier) Public() crypto.PublicKey { return v.key }
