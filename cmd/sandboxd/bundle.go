package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/client"

	"github.com/containerd/errdefs"
	"github.com/docker/go-units"
	"github.com/moby/sys/atomicwriter"

	"github.com/sandboxd/sandboxd/artifacts"
)

// runBundle is `sandboxd bundle get DIGEST -o FILE` and `bundle file`.
func runBundle(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "file" {
		return runBundleFile(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "get" {
		return badUsage("give a subcommand: get or file")
	}
	var c clientFlags
	fs := verbFlags("bundle get", stderr)
	c.register(fs)
	out := fs.String("o", "", "file to write the bundle to (- for stdout)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		fmt.Fprintln(stderr, "usage: sandboxd bundle get DIGEST -o FILE")
		return exitError{2}
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	data, err := fetchBundle(context.Background(), client, pos[0])
	if err != nil {
		return err
	}
	// The daemon is trusted less than the digest: check before writing.
	b, err := artifacts.Verify(bytes.NewReader(data), pos[0], artifacts.DefaultReadLimits(), nil)
	if err != nil {
		return fmt.Errorf("the daemon sent a bundle that does not verify: %w", err)
	}
	if *out == "-" {
		_, err = stdout.Write(data)
		return err
	}
	if err := atomicwriter.WriteFile(*out, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%s, verified %s)\n", *out, units.BytesSize(float64(len(data))), b.Digest)
	// The signature goes beside it, where sandboxd verify --key looks.
	att, err := fetchAttestation(context.Background(), client, pos[0])
	switch {
	case errdefs.IsNotFound(err):
		fmt.Fprintf(stderr, "the bundle is not signed: %v\n", err)
		return nil
	case err != nil:
		return err
	}
	if err := atomicwriter.WriteFile(*out+artifacts.AttestationSuffix, att, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (its signature)\n", *out+artifacts.AttestationSuffix)
	return nil
}

// runBundleFile writes one output file of a bundle to stdout; the daemon
// verifies the bundle as it reads it.
func runBundleFile(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := verbFlags("bundle file", stderr)
	c.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return badUsage("bundle file takes a bundle's digest and a path in its /workspace")
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	rc, err := client.GetFile(context.Background(), pos[0], pos[1])
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(stdout, rc)
	return err
}

// fetchBundle reads a bundle from the daemon, up to the size of the largest
// bundle this client reads.
func fetchBundle(ctx context.Context, client *client.Client, digest string) ([]byte, error) {
	rc, err := client.OpenBundle(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	most := artifacts.DefaultReadLimits().UncompressedBytes
	data, err := io.ReadAll(io.LimitReader(rc, most+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > most {
		return nil, errors.New("the bundle is larger than any this client reads")
	}
	return data, nil
}

// fetchAttestation reads a bundle's signature from the daemon.
func fetchAttestation(ctx context.Context, client *client.Client, digest string) ([]byte, error) {
	rc, err := client.OpenAttestation(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, 1<<20))
}
