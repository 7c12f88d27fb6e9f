// Package session is what the daemon keeps of its sessions: their
// vocabulary (Request, State, Info, and their background processes' and
// ports'), the table of live and recently ended sessions, which bounds
// them per daemon and per tenant, expires them, and leaves a record on
// disk so that a restarted daemon can tell the sessions it lost, and the
// log that keeps a process's last output for readers at offsets.
package session

import (
	"github.com/sandboxd/sandboxd/netpolicy"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

// Request starts a session.
type Request struct {
	// Language picks the image, and the kernel for Python; empty means the
	// command image.
	Language string
	// Options are the session's: image, runtime, limits (timeout is each
	// call's default), network, files, mounts, env, workdir, labels, seed.
	Options run.Options
	// TTL and IdleTTL end the session; zero means the operator's maximum.
	TTL, IdleTTL time.Duration
}

// State is where a session is in its life.
type State string

// The states of a session.
const (
	Active State = "ACTIVE"
	// Paused is a session saved to disk, its container gone, until its
	// owner resumes it.
	Paused  State = "PAUSED"
	Deleted State = "DELETED"
	Expired State = "EXPIRED"
	Failed  State = "FAILED"
	Lost    State = "LOST"
)

// Info describes a session.
type Info struct {
	ID          string            `json:"id"`
	State       State             `json:"state"`
	Reason      string            `json:"reason,omitempty"`
	Language    string            `json:"language,omitempty"`
	Image       string            `json:"image"`
	ImageDigest string            `json:"image_digest"`
	Runtime     string            `json:"runtime"`
	Limits      limits.Limits     `json:"limits"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	LastUsedAt  time.Time         `json:"last_used_at"`
	// ExpiresAt is the end by TTL; IdleExpiresAt by idle TTL, from the
	// last call's end.
	ExpiresAt     time.Time     `json:"expires_at"`
	IdleExpiresAt time.Time     `json:"idle_expires_at"`
	Calls         int64         `json:"calls"`
	LastBundle    string        `json:"last_bundle,omitempty"`
	Start         run.StartPath `json:"start"`
	// Tenant is the caller that created it.
	Tenant string `json:"tenant,omitempty"`
	// Network is the policy in force: the session's, or the last one its
	// owner changed it to.
	Network netpolicy.Policy `json:"network,omitzero"`
}
