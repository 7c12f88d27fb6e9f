package exec

import (
	"time"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Plan is a request as the façade resolved it against the operator's
// policy and the caller's grants: what runs, on what, within what.
type Plan struct {
	Argv     []string
	Image    string
	Language images.Language
	Limits   limits.Limits
	Runtime  string
	Network  netpolicy.Policy
	Workdir  string
	Mounts   []runtime.Mount
	Seed     string // empty when the request sets none
	// Tools are the request's tool patterns: the run has a tool channel;
	// ToolRecord answers its requests in a replay. A session's processes
	// have a channel whatever their call asks (Channel).
	Tools      []string
	ToolRecord []tools.Call
	Channel    bool
	// Replay says which bundle the ToolRecord is of, in a replay.
	Replay Replay
}

// Replay is what a replay takes from the bundle it replays: its
// digest, whether the caller sent its record (rather than the daemon
// reading it from its store), and the tools as that run's daemon resolved
// them, when read from the store (tools.Config.RecordedSpecs).
type Replay struct {
	Of       string
	Supplied bool
	Specs    []tools.Tool
}

// Job is one admitted run as the façade hands it over: who asked, what,
// resolved how, on which image and OCI runtime, and where its events go.
type Job struct {
	ID      string
	Tenant  string
	Request run.Request
	Plan    Plan
	// Image is the image the run's container has, by its catalog name
	// ImageName; Info the backend and OCIRuntime the one it runs on.
	Image      runtime.Image
	ImageName  string
	Info       runtime.Info
	OCIRuntime runtime.OCIRuntime
	// Queued is how long it waited for admission.
	Queued   time.Duration
	Observer run.Observer
	// ToolGrants are the tools the caller's tenant may call.
	ToolGrants []string
}
