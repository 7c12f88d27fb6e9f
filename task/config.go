package task

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// Config is what the engine needs from the operator: data only; the
// collaborators it works with (bundle store, audit log, image lock,
// metrics, peers) are Options.
type Config struct {
	// Instance names this daemon; its containers carry it as a label, and
	// at start it removes whatever an earlier instance of the same name
	// left behind.
	Instance string
	// Node, in a cluster, is this daemon's name among its peers (its pod's
	// name): the ids of its runs and sessions begin with its tag (see
	// cluster.Tag), which tells its peers where they live.
	Node string
	// StateDir holds the tasks' folders (StateDir/tasks/INSTANCE/RUN), so
	// that instances sharing it leave each other's tasks alone.
	StateDir string
	// Catalog lists the languages and images at start; see
	// Service.SetCatalog.
	Catalog images.Catalog
	// AllowedImages are more image digests that may run, besides those of
	// the image lock (WithLock).
	AllowedImages []string
	// Limits is the policy that turns requested limits into effective ones.
	Limits limits.Policy
	// Bounds caps the size of requests.
	Bounds run.Bounds
	// Mounts maps names to host folders a request may mount at /mnt/NAME.
	Mounts map[string]string
	// Network is what the operator allows of the network: with no rules,
	// only none. Allow-listed tasks need an egress gateway (WithEgress).
	Network netpolicy.Operator
	// EgressPoolSize is how many containers per image the pool keeps
	// linked to the egress gateway, for allow-listed tasks.
	EgressPoolSize int
	// DefaultRuntime is the OCI runtime of requests that name none; empty
	// means crun where the backend has it and AllowedRuntimes allows it,
	// else the backend's default (runsc when RequireRunsc is set).
	DefaultRuntime string
	// AllowedRuntimes are the OCI runtimes a request may ask for; empty
	// allows every known runtime the backend has.
	AllowedRuntimes []string
	// RequireRunsc runs every task under gVisor: a request for another
	// runtime is refused, and the daemon does not start without runsc.
	RequireRunsc bool
	// MaxRunning bounds the runs that execute at once.
	MaxRunning int
	// MaxQueued bounds the runs that wait for a slot; beyond it a request
	// is refused at once.
	MaxQueued int
	// KillOutputBytes stops a run whose stdout or stderr passes it (or the
	// stream's own cap, if larger) with OUTPUT_LIMIT, so that a flood does
	// not run to its timeout.
	KillOutputBytes int64
	// NoFile is the open-files limit of every task.
	NoFile int64
	// KeepFinished is how many finished runs GetRun remembers.
	KeepFinished int
	// Output bounds what is collected from /workspace into a bundle.
	Output taskdir.OutputLimits
	// Version is sandboxd's version, recorded in bundles.
	Version string
	// PoolSize is how many containers per image are kept started ahead of
	// time on the default runtime, each for one task; 0 turns the pool
	// off. It needs a backend that can prepare containers.
	PoolSize int
	// Prestart has the pooled containers of images with Python start
	// the interpreter ahead of the task, with the recipe's preimport
	// modules imported (docs/prestart.md).
	Prestart bool
	// UIDs are the host uids given to sandboxes, one per container.
	UIDs hostuid.Range
	// StallTimeout is how long a finished run waits for its caller to
	// take the output still queued for it; a caller that takes none for
	// that long is dropped.
	StallTimeout time.Duration
	// AuditRequired refuses runs and new sessions while the audit log
	// (WithAudit) cannot be written: none goes unrecorded.
	AuditRequired bool
	// MaxSessions bounds the live sessions; 0 turns sessions off.
	// SessionTTL and SessionIdleTTL are the longest a session may live,
	// and stay idle, and what a session that asks for no TTL gets.
	MaxSessions    int
	SessionTTL     time.Duration
	SessionIdleTTL time.Duration
	// SessionProcesses bounds the background processes a session keeps,
	// running or ended (the oldest ended are forgotten first), and
	// ProcessOutputBytes what is kept of each stream of each, its last
	// bytes. ProcessesKeepAlive counts a running background process as a
	// session's use, so that its idle TTL does not end it.
	SessionProcesses   int
	ProcessOutputBytes int
	ProcessesKeepAlive bool
	// InboundURL is where sandboxd's inbound proxy serves a session's
	// opened port, {token} standing for the port's token (e.g.
	// http://{token}.localhost:8090/); empty, no port can be opened.
	InboundURL string
}

// DefaultConfig is the configuration of a daemon started without flags.
func DefaultConfig() Config {
	return Config{
		Instance:        "default",
		StateDir:        "/var/lib/sandboxd",
		Catalog:         images.Default(),
		Limits:          limits.DefaultPolicy(),
		Bounds:          run.DefaultBounds(),
		Network:         netpolicy.DefaultOperator(),
		EgressPoolSize:  1,
		MaxRunning:      4,
		MaxQueued:       64,
		KillOutputBytes: 16 << 20,
		NoFile:          1024,
		KeepFinished:    1024,
		Output:          taskdir.DefaultOutputLimits(),
		Version:         "dev",
		PoolSize:        2,
		Prestart:        true,
		UIDs:            hostuid.DefaultRange(),
		StallTimeout:    30 * time.Second,
		MaxSessions:     16,
		SessionTTL:      time.Hour,
		SessionIdleTTL:  10 * time.Minute,

		SessionProcesses:   32,
		ProcessOutputBytes: 1 << 20,
	}
}

var instanceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// Validate rejects a configuration that contradicts itself.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf(format, args...))
	}
	switch {
	case !instanceName.MatchString(c.Instance):
		return bad("instance %q: use 1-32 of a-z 0-9 _ . - starting with a letter or digit", c.Instance)
	case !filepath.IsAbs(c.StateDir):
		return bad("state dir %q is not an absolute path", c.StateDir)
	case c.MaxRunning < 1:
		return bad("max running %d: at least one task must be able to run", c.MaxRunning)
	case c.MaxQueued < 0:
		return bad("max queued %d is negative", c.MaxQueued)
	case c.KillOutputBytes < 1:
		return bad("kill output bytes %d must be positive", c.KillOutputBytes)
	case c.NoFile < 16:
		return bad("nofile %d is too low for any interpreter", c.NoFile)
	case c.KeepFinished < 0:
		return bad("keep finished %d is negative", c.KeepFinished)
	case c.MaxSessions < 0:
		return bad("max sessions %d is negative", c.MaxSessions)
	case c.MaxSessions > 0 && (c.SessionTTL <= 0 || c.SessionIdleTTL <= 0):
		return bad("session TTL %v and idle TTL %v must be positive", c.SessionTTL, c.SessionIdleTTL)
	case c.SessionProcesses < 0 || c.ProcessOutputBytes < 1:
		return bad("session processes %d and process output bytes %d: the one must not be negative, the other positive", c.SessionProcesses, c.ProcessOutputBytes)
	case c.InboundURL != "" && strings.Count(c.InboundURL, "{token}") != 1:
		return bad("inbound URL %q: name {token} once, where each opened port's token goes", c.InboundURL)
	case len(c.Catalog.Languages) == 0:
		return bad("the catalog has no language")
	case c.DefaultRuntime != "" && !slices.Contains(knownRuntimes, c.DefaultRuntime):
		return bad("default runtime %q is not one of %q", c.DefaultRuntime, knownRuntimes)
	case c.RequireRunsc && c.DefaultRuntime != "" && c.DefaultRuntime != runtime.RunscName:
		return bad("runsc is required, but the default runtime is %q", c.DefaultRuntime)
	case c.DefaultRuntime != "" && len(c.AllowedRuntimes) > 0 && !slices.Contains(c.AllowedRuntimes, c.DefaultRuntime):
		return bad("the default runtime %q is not among the allowed %q", c.DefaultRuntime, c.AllowedRuntimes)
	case c.PoolSize < 0:
		return bad("pool size %d is negative", c.PoolSize)
	case c.EgressPoolSize < 0:
		return bad("egress pool size %d is negative", c.EgressPoolSize)
	case c.StallTimeout <= 0:
		return bad("stall timeout %v must be positive", c.StallTimeout)
	case c.Output.Files < 0 || c.Output.Bytes < 0 || c.Output.Entries < 1 || c.Output.Depth < 1:
		return bad("output limits %+v: counts and sizes must not be negative", c.Output)
	}
	if err := c.UIDs.Validate(); err != nil {
		return bad("%v", err)
	}
	for _, r := range c.AllowedRuntimes {
		if !slices.Contains(knownRuntimes, r) {
			return bad("allowed runtime %q is not one of %q", r, knownRuntimes)
		}
	}
	for name, dir := range c.Mounts {
		if !mountName.MatchString(name) {
			return bad("mount name %q: use 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit", name)
		}
		if !filepath.IsAbs(dir) {
			return bad("mount %s: %q is not an absolute path", name, dir)
		}
	}
	if err := c.Network.Validate(); err != nil {
		return bad("%v", err)
	}
	return c.Limits.Validate()
}

var mountName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// knownRuntimes are the OCI runtimes a request may name. Unexported, so
// that nothing outside the engine can widen the set at run time.
var knownRuntimes = []string{"runc", runtime.CrunName, runtime.RunscName}
