// Package wire converts between the sandboxd.v1 API's messages and the
// engine's types, both ways: the service (package server) reads requests
// and writes events with it, its Go client (package client) the other way
// round. A field the engine's types cannot hold is refused by its name.
package wire

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// OptionsFromProto converts a request's options, refusing what does not
// fit the engine's types by the field's name.
func OptionsFromProto(o *pb.RunOptions) (run.Options, error) {
	lim, err := LimitsFromProto(o.GetLimits())
	if err != nil {
		return run.Options{}, err
	}
	net, err := NetworkFromProto(o.GetNetwork())
	if err != nil {
		return run.Options{}, err
	}
	files := filesFromProto(o.GetFiles())
	opts := run.Options{
		Image:   o.GetImage(),
		Runtime: o.GetRuntime(),
		Limits:  lim,
		Network: net,
		Files:   files,
		Mounts:  o.GetMounts(),
		Env:     o.GetEnv(),
		Workdir: o.GetWorkdir(),
		Labels:  o.GetLabels(),
		// A session's call.
		SessionID:      o.GetSessionId(),
		IdempotencyKey: o.GetIdempotencyKey(),
		Tools:          o.GetTools(),
		LiveReadTools:  o.GetLiveReadTools(),
	}
	opts.ReplayOf = o.GetReplayOf()
	if len(o.GetToolRecord()) > 0 {
		opts.ToolRecord = o.GetToolRecord()
	}
	interp, ok := InterpreterFromProto[o.GetInterpreter()]
	if !ok {
		return run.Options{}, run.Invalid("interpreter", "%d is not an interpreter of the API", o.GetInterpreter())
	}
	opts.Interpreter = interp
	if len(o.GetStdin()) > 0 {
		opts.Stdin = o.GetStdin()
	}
	if o != nil && o.Seed != nil {
		seed := o.GetSeed()
		opts.Seed = &seed
	}
	return opts, nil
}

// NetworkFromProto maps the API's network to a request's. A mode this
// version does not know is passed on by name so that the engine refuses it
// with a clear message.
func NetworkFromProto(n *pb.Network) (netpolicy.Request, error) {
	var req netpolicy.Request
	switch n.GetMode() {
	case pb.NetworkMode_NETWORK_MODE_UNSPECIFIED:
	case pb.NetworkMode_NETWORK_MODE_NONE:
		req.Mode = netpolicy.None
	case pb.NetworkMode_NETWORK_MODE_ALLOWLIST:
		req.Mode = netpolicy.AllowList
	default:
		req.Mode = netpolicy.Mode(n.GetMode().String())
	}
	req.Policy = n.GetPolicy()
	if len(n.GetRules()) > netpolicy.MaxRules {
		return netpolicy.Request{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("network.rules: %d rules, above the limit of %d", len(n.GetRules()), netpolicy.MaxRules))
	}
	for i, r := range n.GetRules() {
		rule, err := RuleFromProto(r)
		if err != nil {
			return netpolicy.Request{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("network.rules[%d]: %v", i, err))
		}
		req.Rules = append(req.Rules, rule)
	}
	c := n.GetCaps()
	if c.GetConnections() > math.MaxInt32 {
		return netpolicy.Request{}, errdefs.ErrInvalidArgument.WithMessage("network.caps.connections: too large")
	}
	req.Caps = netpolicy.Caps{BytesOut: c.GetBytesOut(), BytesIn: c.GetBytesIn(), Connections: int(c.GetConnections())}
	req.Secrets = n.GetSecrets()
	return req, nil
}

// NetworkToProto is a request's network as the API carries it; nil when
// the request leaves the default.
func NetworkToProto(n netpolicy.Request) *pb.Network {
	switch n.Mode {
	case netpolicy.None:
		return &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}
	case netpolicy.AllowList:
		c := n.Caps
		return &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_ALLOWLIST, Policy: n.Policy, Rules: RulesToProto(n.Rules),
			Caps: &pb.NetworkCaps{BytesOut: c.BytesOut, BytesIn: c.BytesIn, Connections: int64(c.Connections)}, Secrets: n.Secrets}
	}
	return nil
}

// PolicyToProto is a policy in force, as the API reports it; nil for none
// recorded.
func PolicyToProto(p netpolicy.Policy) *pb.Network {
	switch p.Mode {
	case netpolicy.None:
		return &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}
	case netpolicy.AllowList:
		return &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_ALLOWLIST, Policy: p.Name, Rules: RulesToProto(p.Rules), Secrets: p.Secrets,
			Caps: &pb.NetworkCaps{BytesOut: p.Caps.BytesOut, BytesIn: p.Caps.BytesIn, Connections: int64(p.Caps.Connections)}}
	}
	return nil
}

// PolicyFromProto is PolicyToProto's inverse.
func PolicyFromProto(n *pb.Network) netpolicy.Policy {
	p := netpolicy.Policy{Name: n.GetPolicy(), Secrets: n.GetSecrets()}
	switch n.GetMode() {
	case pb.NetworkMode_NETWORK_MODE_NONE:
		p.Mode = netpolicy.None
	case pb.NetworkMode_NETWORK_MODE_ALLOWLIST:
		p.Mode = netpolicy.AllowList
	}
	for _, r := range n.GetRules() {
		if rule, err := RuleFromProto(r); err == nil {
			p.Rules = append(p.Rules, rule)
		}
	}
	if c := n.GetCaps(); c != nil {
		p.Caps = netpolicy.Caps{BytesOut: c.GetBytesOut(), BytesIn: c.GetBytesIn(), Connections: int(c.GetConnections())}
	}
	return p
}

func RuleFromProto(r *pb.NetworkRule) (netpolicy.Rule, error) {
	rule := netpolicy.Rule{Host: r.GetHost(), CIDR: r.GetCidr()}
	if len(r.GetPorts()) > 64 {
		return netpolicy.Rule{}, fmt.Errorf("%d ports, above the limit of 64", len(r.GetPorts()))
	}
	for _, p := range r.GetPorts() {
		if p == 0 || p > math.MaxUint16 {
			return netpolicy.Rule{}, fmt.Errorf("port %d is not a TCP port", p)
		}
		rule.Ports = append(rule.Ports, uint16(p))
	}
	return rule, nil
}

func RuleToProto(r netpolicy.Rule) *pb.NetworkRule {
	out := &pb.NetworkRule{Host: r.Host, Cidr: r.CIDR}
	for _, p := range r.Ports {
		out.Ports = append(out.Ports, uint32(p))
	}
	return out
}

func RulesToProto(rules []netpolicy.Rule) []*pb.NetworkRule {
	out := make([]*pb.NetworkRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, RuleToProto(r))
	}
	return out
}

// LimitsFromProto converts limits, refusing a timeout_ms that does not fit
// a time.Duration rather than letting it wrap around.
func LimitsFromProto(l *pb.Limits) (limits.Limits, error) {
	timeout, err := limits.Millis(l.GetTimeoutMs())
	if err != nil {
		return limits.Limits{}, fmt.Errorf("limits.timeout_ms: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return limits.Limits{
		MemoryBytes: l.GetMemoryBytes(),
		CPUMillis:   l.GetCpuMillis(),
		Pids:        l.GetPids(),
		Timeout:     timeout,
		StdoutBytes: l.GetStdoutBytes(),
		StderrBytes: l.GetStderrBytes(),
		DiskBytes:   l.GetDiskBytes(),
	}, nil
}

func LimitsToProto(l limits.Limits) *pb.Limits {
	return &pb.Limits{
		MemoryBytes: l.MemoryBytes,
		CpuMillis:   l.CPUMillis,
		Pids:        l.Pids,
		TimeoutMs:   l.Timeout.Milliseconds(),
		StdoutBytes: l.StdoutBytes,
		StderrBytes: l.StderrBytes,
		DiskBytes:   l.DiskBytes,
	}
}

func StartedToProto(s run.Started) *pb.Started {
	return &pb.Started{
		RunId:          s.RunID,
		Limits:         LimitsToProto(s.Limits),
		Image:          s.Image,
		ImageDigest:    s.ImageDigest,
		Runtime:        s.Runtime,
		RuntimeVersion: s.RuntimeVersion,
		Backend:        s.Backend,
		StartedAt:      timestamppb.New(s.StartedAt),
		Prestarted:     s.Prestarted,
		Preimported:    s.Preimported,
	}
}

var InterpreterToProto = map[run.Interpreter]pb.Interpreter{
	run.InterpreterAny:        pb.Interpreter_INTERPRETER_UNSPECIFIED,
	run.InterpreterFresh:      pb.Interpreter_INTERPRETER_FRESH,
	run.InterpreterPrestarted: pb.Interpreter_INTERPRETER_PRESTARTED,
}

var InterpreterFromProto = inverse(InterpreterToProto)

// inverse is the map from m's values to its keys, m being one-to-one.
func inverse[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var StatusToProto = map[run.Status]pb.Status{
	run.StatusOK:             pb.Status_OK,
	run.StatusNonzeroExit:    pb.Status_NONZERO_EXIT,
	run.StatusTimeout:        pb.Status_TIMEOUT,
	run.StatusOOMKilled:      pb.Status_OOM_KILLED,
	run.StatusOutputLimit:    pb.Status_OUTPUT_LIMIT,
	run.StatusCancelled:      pb.Status_CANCELLED,
	run.StatusKilledBySignal: pb.Status_KILLED_BY_SIGNAL,
	run.StatusRuntimeError:   pb.Status_RUNTIME_ERROR,
	run.StatusKernelDied:     pb.Status_KERNEL_DIED,
	run.StatusLost:           pb.Status_LOST,
	run.StatusCompileError:   pb.Status_COMPILE_ERROR,
}

func ResultToProto(r run.Result) *pb.Result {
	out := &pb.Result{
		RunId:              r.RunID,
		Tenant:             r.Tenant,
		Status:             StatusToProto[r.Status],
		ExitCode:           int32(r.ExitCode),
		Signal:             int32(r.Signal),
		Duration:           durationpb.New(r.Duration),
		Queued:             durationpb.New(r.Queued),
		StdoutTotal:        r.StdoutTotal,
		StderrTotal:        r.StderrTotal,
		StdoutTruncated:    r.StdoutTruncated,
		StderrTruncated:    r.StderrTruncated,
		PeakMemoryBytes:    r.PeakMemoryBytes,
		Limits:             LimitsToProto(r.Limits),
		Message:            r.Message,
		BundleDigest:       r.BundleDigest,
		BundleError:        r.BundleError,
		ReproducibleDigest: r.ReproducibleDigest,
		Files:              OutputsToProto(r.Files),
		Start:              string(r.Start),
		ColdReason:         r.ColdReason,
		ToolCalls:          int32(r.ToolCalls),
	}
	if n := r.Network; n != nil {
		out.NetworkConnections, out.NetworkDenied = int64(n.Connections), int64(n.Denied)
		out.NetworkBytesOut, out.NetworkBytesIn = n.BytesOut, n.BytesIn
	}
	out.Session, out.Kernel = SessionCallToProto(r.Session), KernelToProto(r.Kernel)
	return out
}

func OutputsToProto(outs []artifacts.Output) []*pb.OutputFile {
	files := make([]*pb.OutputFile, 0, len(outs))
	for _, o := range outs {
		files = append(files, &pb.OutputFile{Path: o.Path, Type: o.Type, Size: o.Size, Sha256: o.SHA256, Omitted: o.Omitted})
	}
	return files
}

func RunToProto(r run.Info) *pb.GetRunResponse {
	out := &pb.GetRunResponse{RunId: r.ID, Tenant: r.Tenant, State: RunStateToProto(r.State), Labels: r.Labels, Error: r.Error}
	if r.Started != nil {
		out.Started = StartedToProto(*r.Started)
	}
	if r.Result != nil {
		out.Result = ResultToProto(*r.Result)
	}
	network := r.Network
	if r.Result != nil && r.Result.Network != nil {
		network = run.NetworkEvents(r.Result.Network.Events)
	}
	for _, ev := range network {
		out.Network = append(out.Network, NetworkEventToProto(ev))
	}
	return out
}

func NetworkEventToProto(ev run.NetworkEvent) *pb.NetworkEvent {
	return &pb.NetworkEvent{
		Index: int32(ev.Index), Time: timestamppb.New(ev.Time), Kind: ev.Kind, Name: ev.Name, Via: ev.Via, Port: uint32(ev.Port),
		Addr: ev.Addr, Allowed: ev.Allowed, Rule: ev.Rule, Reason: ev.Reason, BytesOut: ev.BytesOut, BytesIn: ev.BytesIn,
		Secrets: ev.Secrets, Injections: int32(ev.Injections), Masked: int32(ev.Masked),
	}
}

func NetworkEventFromProto(ev *pb.NetworkEvent) run.NetworkEvent {
	return run.NetworkEvent{Index: int(ev.GetIndex()), Event: netpolicy.Event{
		Time: ev.GetTime().AsTime(), Kind: ev.GetKind(), Name: ev.GetName(), Via: ev.GetVia(), Port: uint16(ev.GetPort()),
		Addr: ev.GetAddr(), Allowed: ev.GetAllowed(), Rule: ev.GetRule(), Reason: ev.GetReason(), BytesOut: ev.GetBytesOut(), BytesIn: ev.GetBytesIn(),
		Secrets: ev.GetSecrets(), Injections: int(ev.GetInjections()), Masked: int(ev.GetMasked()),
	}}
}

func RunFromProto(r *pb.GetRunResponse) run.Info {
	out := run.Info{ID: r.GetRunId(), Tenant: r.GetTenant(), State: RunStateFromProto(r.GetState()), Labels: r.GetLabels(), Error: r.GetError()}
	if r.GetStarted() != nil {
		s := StartedFromProto(r.GetStarted())
		out.Started = &s
	}
	if r.GetResult() != nil {
		res := ResultFromProto(r.GetResult())
		out.Result = &res
	}
	for _, ev := range r.GetNetwork() {
		out.Network = append(out.Network, NetworkEventFromProto(ev))
	}
	if res := out.Result; res != nil && res.Network != nil {
		// As the engine has it: an ended run's log is its result's.
		for _, ev := range out.Network {
			res.Network.Events = append(res.Network.Events, ev.Event)
		}
		out.Network = nil
	}
	return out
}

func RunStateFromProto(s pb.RunState) run.State {
	switch s {
	case pb.RunState_RUN_STATE_RUNNING:
		return run.Running
	case pb.RunState_RUN_STATE_FINISHED:
		return run.Finished
	}
	return 0
}

func RunStateToProto(s run.State) pb.RunState {
	switch s {
	case run.Running:
		return pb.RunState_RUN_STATE_RUNNING
	case run.Finished:
		return pb.RunState_RUN_STATE_FINISHED
	}
	return pb.RunState_RUN_STATE_UNSPECIFIED
}

func InventoryToProto(inv task.Inventory) *pb.ListImagesResponse {
	out := &pb.ListImagesResponse{
		Backend:       inv.Backend,
		DefaultLimits: LimitsToProto(inv.DefaultLimits),
		MaxLimits:     LimitsToProto(inv.MaxLimits),
		Mounts:        inv.Mounts,
	}
	for _, l := range inv.Languages {
		out.Languages = append(out.Languages, &pb.Language{Name: l.Name, Image: l.Image, Command: l.Command})
	}
	for _, im := range inv.Images {
		out.Images = append(out.Images, &pb.Image{Name: im.Name, Digest: im.Digest, LockedDigest: im.LockedDigest, Present: im.Digest != "",
			RecipeDigest: im.RecipeDigest, LockedRecipeDigest: im.LockedRecipe, Packages: im.Packages})
	}
	for _, p := range inv.Pools {
		pool := &pb.Pool{Image: p.Image, Runtime: p.Runtime, Ready: int32(p.Ready), Size: int32(p.Size), Egress: p.Egress, Preimport: p.Preimport, Failure: p.Failure, Failures: p.Failures}
		if !p.FailingSince.IsZero() {
			pool.FailingSince = timestamppb.New(p.FailingSince)
		}
		out.Pools = append(out.Pools, pool)
	}
	out.NetworkRules = RulesToProto(inv.NetworkRules)
	for _, sec := range inv.NetworkSecrets {
		out.NetworkSecrets = append(out.NetworkSecrets, &pb.NetworkSecret{Name: sec.Name, Hosts: sec.Hosts, Paths: sec.Paths, Methods: sec.Methods,
			Placeholder: netpolicy.Placeholder(sec.Name), ProgramEnv: sec.ProgramEnv})
	}
	out.SigningKeys = inv.SigningKeys
	out.Version, out.EngineVersion = inv.Version, inv.BackendVersion
	for _, t := range inv.Tools {
		out.Tools = append(out.Tools, ToolSpecToProto(t))
	}
	for _, name := range slices.Sorted(maps.Keys(inv.NetworkPolicies)) {
		out.NetworkPolicies = append(out.NetworkPolicies, &pb.NetworkPolicy{Name: name, Rules: RulesToProto(inv.NetworkPolicies[name])})
	}
	for _, r := range inv.Runtimes {
		out.Runtimes = append(out.Runtimes, &pb.RuntimeInfo{Name: r.Name, Version: r.Version, IsDefault: r.Name == inv.DefaultRuntime, Allowed: r.Allowed})
	}
	return out
}

// AnsweredLimits are the limits of a daemon's answer, which are the
// engine's own and always fit.
func AnsweredLimits(l *pb.Limits) limits.Limits {
	lim, _ := LimitsFromProto(l)
	return lim
}

func OptionsToProto(o run.Options) *pb.RunOptions {
	out := &pb.RunOptions{
		Image: o.Image, Runtime: o.Runtime, Limits: LimitsToProto(o.Limits), Mounts: o.Mounts, Env: o.Env,
		Stdin: o.Stdin, Workdir: o.Workdir, Labels: o.Labels, Seed: o.Seed, SessionId: o.SessionID,
		IdempotencyKey: o.IdempotencyKey, Interpreter: InterpreterToProto[o.Interpreter], Tools: o.Tools,
		ToolRecord: o.ToolRecord, LiveReadTools: o.LiveReadTools, ReplayOf: o.ReplayOf,
	}
	out.Network = NetworkToProto(o.Network)
	out.Files = filesToProto(o.Files)
	return out
}

func StartedFromProto(s *pb.Started) run.Started {
	return run.Started{
		RunID: s.GetRunId(), Limits: AnsweredLimits(s.GetLimits()), Image: s.GetImage(), ImageDigest: s.GetImageDigest(),
		Runtime: s.GetRuntime(), RuntimeVersion: s.GetRuntimeVersion(), Backend: s.GetBackend(), StartedAt: s.GetStartedAt().AsTime(),
		Prestarted: s.GetPrestarted(), Preimported: s.GetPreimported(),
	}
}

var StatusFromProto = inverse(StatusToProto)

func ResultFromProto(r *pb.Result) run.Result {
	res := run.Result{
		RunID: r.GetRunId(), Tenant: r.GetTenant(), Status: StatusFromProto[r.GetStatus()], ExitCode: int(r.GetExitCode()), Signal: int(r.GetSignal()),
		Duration: r.GetDuration().AsDuration(), Queued: r.GetQueued().AsDuration(),
		StdoutTotal: r.GetStdoutTotal(), StderrTotal: r.GetStderrTotal(),
		StdoutTruncated: r.GetStdoutTruncated(), StderrTruncated: r.GetStderrTruncated(),
		PeakMemoryBytes: r.GetPeakMemoryBytes(), Limits: AnsweredLimits(r.GetLimits()), Message: r.GetMessage(),
		BundleDigest: r.GetBundleDigest(), BundleError: r.GetBundleError(), ReproducibleDigest: r.GetReproducibleDigest(),
		Start: run.StartPath(r.GetStart()), ColdReason: r.GetColdReason(), ToolCalls: int(r.GetToolCalls()),
	}
	if r.GetNetworkConnections() > 0 || r.GetNetworkDenied() > 0 {
		res.Network = &netpolicy.Summary{Connections: int(r.GetNetworkConnections()), Denied: int(r.GetNetworkDenied()),
			BytesOut: r.GetNetworkBytesOut(), BytesIn: r.GetNetworkBytesIn()}
	}
	res.Files = OutputsFromProto(r.GetFiles())
	res.Session, res.Kernel = SessionCallFromProto(r.GetSession()), KernelFromProto(r.GetKernel())
	return res
}

func OutputsFromProto(files []*pb.OutputFile) []artifacts.Output {
	var out []artifacts.Output
	for _, f := range files {
		out = append(out, artifacts.Output{Path: f.GetPath(), Type: f.GetType(), Size: f.GetSize(), SHA256: f.GetSha256(), Omitted: f.GetOmitted()})
	}
	return out
}
