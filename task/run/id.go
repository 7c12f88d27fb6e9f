package run

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/sandboxd/sandboxd/cluster"
)

// NewID returns a random run id, of the daemon called node in a cluster;
// sessions take their ids from it too.
func NewID(node string) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	if node != "" {
		// The node's tag first: the id says which daemon holds the run.
		id = cluster.Tag(node) + id[cluster.TagLen:]
	}
	return id, nil
}
