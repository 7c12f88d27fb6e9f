package main

import (
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/artifacts/provenance"
)

// runKey manages a daemon's signing keys on its host: rotate makes a new
// one (the daemon uses it from its next SIGHUP; the old public half stays
// in the ring), public prints the current public key.
func runKey(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "rotate" && args[0] != "public") {
		return badUsage("give a subcommand: rotate or public")
	}
	cfg := DefaultConfig()
	fs := verbFlags("key "+args[0], stderr)
	fs.StringVar(&cfg.Task.StateDir, "state-dir", cfg.Task.StateDir, "the daemon's --state-dir")
	fs.StringVar(&cfg.Task.Instance, "instance", cfg.Task.Instance, "the daemon's --instance")
	if err := fs.Parse(args[1:]); err != nil {
		return parseError(fs, err)
	}
	if fs.NArg() > 0 {
		return badUsage("key %s takes no arguments", args[0])
	}
	ring, err := provenance.Open(signingDir(cfg))
	if err != nil {
		return err
	}
	if args[0] == "rotate" {
		old := ring.KeyID()
		if err := ring.Rotate(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "signing key %s replaces %s (kept to verify what it signed); SIGHUP the daemon to use it\n", ring.KeyID(), old)
	}
	_, err = io.WriteString(stdout, ring.PublicKeys()[0])
	return err
}

// keyIDs are the ids of PEM public keys, or why one does not parse.
func keyIDs(pems []string) []string {
	var ids []string
	for _, p := range pems {
		pub, err := provenance.ParsePublic([]byte(p))
		if err != nil {
			ids = append(ids, "(unreadable: "+err.Error()+")")
			continue
		}
		id, _ := provenance.KeyID(pub)
		ids = append(ids, id)
	}
	return ids
}
