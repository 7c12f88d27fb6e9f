package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/reproducer"
)

// runVerify is `sandboxd verify BUNDLE`.
func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	want := fs.String("digest", "", "the digest the bundle must have (default: from a HEX.tar.zst file name)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd verify [--digest sha256:...] BUNDLE")
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
	return nil
}
