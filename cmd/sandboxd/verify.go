package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/artifacts/provenance"
	"github.com/sandboxd/sandboxd/reproducer"
)

// runVerify is `sandboxd verify BUNDLE`.
func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := verbFlags("verify", stderr)
	want := fs.String("digest", "", "the digest the bundle must have (default: from a HEX.tar.zst file name)")
	keyFile := fs.String("key", "", "a daemon's PEM public key: the bundle must carry its signature (BUNDLE"+artifacts.AttestationSuffix+", or --attestation)")
	attFile := fs.String("attestation", "", "the bundle's signature (default: BUNDLE"+artifacts.AttestationSuffix+")")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd verify [--digest sha256:...] [--key PUB.pem [--attestation FILE]] BUNDLE")
		return exitError{2}
	}
	name := pos[0]
	if *want == "" {
		*want = reproducer.DigestFromName(name)
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := artifacts.Verify(f, *want, artifacts.DefaultReadLimits(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd verify: %s: REFUSED: %v\n", name, err)
		return exitError{1}
	}
	checked := "no digest to check the whole against"
	if *want != "" {
		checked = "matches its expected digest"
	}
	fmt.Fprintf(stdout, "%s: sound bundle %s (%d entries, %s uncompressed; %s)\n", name, b.Digest,
		len(b.Manifest.Reproducible.Entries)+1, units.BytesSize(float64(b.UncompressedBytes)), checked)
	if *keyFile == "" {
		return nil
	}
	if *attFile == "" {
		*attFile = name + artifacts.AttestationSuffix
	}
	run, id, err := checkSignature(*keyFile, *attFile, b)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd verify: %s: REFUSED: %v\n", name, err)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: signed by key %s: run %s on %s (%s, recipe %s), %s %s, result %s\n", name, id,
		run.RunID, run.Image.Name, run.Image.Digest, orDash(run.Image.Recipe), run.Runtime, run.RuntimeVersion, run.Result.Status)
	return nil
}

// checkSignature checks that the attestation file is the signature of b by
// the key in keyFile, and that what it says is what b says.
func checkSignature(keyFile, attFile string, b *artifacts.Bundle) (*provenance.Run, string, error) {
	pemKey, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, "", err
	}
	pub, err := provenance.ParsePublic(pemKey)
	if err != nil {
		return nil, "", fmt.Errorf("key %s: %w", keyFile, err)
	}
	id, _ := provenance.KeyID(pub)
	env, err := os.ReadFile(attFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, id, fmt.Errorf("no signature: %s does not exist (sandboxd bundle get writes it beside the bundle)", attFile)
	}
	if err != nil {
		return nil, id, err
	}
	run, err := provenance.Verify(env, pub, b.Digest)
	if err != nil {
		return nil, id, err
	}
	// The signature binds the digest; what it says must also be what the
	// bundle says.
	want, _ := json.Marshal(provenance.RunOf(&b.Manifest))
	got, _ := json.Marshal(run)
	if !bytes.Equal(want, got) {
		return nil, id, fmt.Errorf("the signed statement says %s, the bundle %s", got, want)
	}
	return run, id, nil
}
