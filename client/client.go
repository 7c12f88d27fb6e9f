// Package client is sandboxd's Go client: the gRPC API spoken with the
// engine's own types (run.Request, run.Result, session.Info ...), so that a
// daemon over its socket and the engine in the caller's process answer the
// same calls (the CLI, sandboxd mcp, replay and the bench use both). It
// retries refusals as RetryInfo says, follows a run or session to the
// daemon of a cluster that holds it, and answers the caller's tools on a
// RunWithTools stream.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/cluster"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/netpolicy"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// Client is a running daemon's engine reached over its gRPC API. It offers
// the same Run, Inventory, OpenBundle, Get and Cancel as task.Service, with
// the same types and error classes, so that the CLI, replays and MCP sit on
// either.
type Client struct {
	c    pb.SandboxServiceClient
	conn *grpc.ClientConn // when Dial made it
	// dial is how Dial reached the daemon, to reach its peers the same
	// way; nil for a peer's client, which does not redirect again.
	dial  *DialOptions
	mu    sync.Mutex
	peers map[string]*Client
}

// NewClient returns a Client on conn.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{c: pb.NewSandboxServiceClient(conn)}
}

// DialOptions say how to reach a daemon.
type DialOptions struct {
	// Socket is the daemon's unix socket.
	Socket string
	// Addr is the daemon's TCP address HOST:PORT, used instead of Socket
	// when set.
	Addr string
	// Token is the bearer token sent with every call, if any.
	Token string
	// TLS, when set, makes the connection to Addr TLS with this
	// configuration (see tlsconf.Files.ClientConfig).
	TLS *tls.Config
	// Retry is how refusals that name a delay are retried; the zero
	// value does not retry.
	Retry Retry
}

// Dial returns a Client on the daemon of o. gRPC connects lazily: a daemon
// that does not answer shows on the first call. A host name that resolves
// to many daemons (a Kubernetes headless Service) is balanced over them,
// call by call; a call for a run or session that another of them holds is
// made again there.
func Dial(o DialOptions) (*Client, error) {
	c, err := dialOnce(o)
	if err != nil {
		return nil, err
	}
	c.dial = &o
	return c, nil
}

func dialOnce(o DialOptions, extra ...grpc.DialOption) (*Client, error) {
	target := "unix://" + o.Socket
	if o.Addr != "" {
		target = "dns:///" + o.Addr
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
	}
	if o.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(o.Token)))
	}
	if o.Retry.Within > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(o.Retry.unary), grpc.WithChainStreamInterceptor(o.Retry.stream))
	}
	conn, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	return &Client{c: pb.NewSandboxServiceClient(conn), conn: conn}, nil
}

// Close closes the connections Dial made.
func (c *Client) Close() error {
	c.mu.Lock()
	for _, p := range c.peers {
		p.Close()
	}
	c.peers = nil
	c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Healthy says whether the daemon answers its health check as serving.
func (c *Client) Healthy(ctx context.Context) bool {
	if c.conn == nil {
		return false
	}
	resp, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// bearerToken sends "authorization: Bearer TOKEN" with every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity allows the token over plaintext: a daemon
// serves a network listener without TLS on loopback only, unless its
// operator said --insecure-listen.
func (bearerToken) RequireTransportSecurity() bool { return false }

// Run runs a task on the daemon, reporting its events to obs (its
// network too, when obs is a run.NetworkObserver).
func (c *Client) Run(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error) {
	if side := req.Caller; hasSide(side) {
		// The caller's side is answered on a RunWithTools stream.
		return c.runWithSide(ctx, req, side, obs)
	}
	return retryElsewhere(c, func(c *Client) (run.Result, error) {
		stream, err := c.start(ctx, req, false)
		if err != nil {
			return run.Result{}, err
		}
		return follow(stream, obs)
	})
}

// Detach starts a task on the daemon that goes on without the caller, and
// returns once it started (or ended without starting: then only the
// RunID is set); Attach, Wait and Get follow it.
func (c *Client) Detach(ctx context.Context, req run.Request) (run.Started, error) {
	return retryElsewhere(c, func(c *Client) (run.Started, error) {
		stream, err := c.start(ctx, req, true)
		if err != nil {
			return run.Started{}, err
		}
		ev, err := stream.Recv()
		if err != nil {
			return run.Started{}, fromStatus(err)
		}
		if res := ev.GetResult(); res != nil {
			// The run ended without starting (a keyed retry of a LOST
			// run): its id, which Get and Attach answer with the result.
			return run.Started{RunID: res.GetRunId()}, nil
		}
		st := ev.GetStarted()
		if st == nil {
			return run.Started{}, errdefs.ErrUnavailable.WithMessage("the daemon answered a detached run without its start")
		}
		return wire.StartedFromProto(st), nil
	})
}

func (c *Client) start(ctx context.Context, req run.Request, detach bool) (grpc.ServerStreamingClient[pb.RunEvent], error) {
	opts := wire.OptionsToProto(req.Options)
	opts.Detach = detach
	var stream grpc.ServerStreamingClient[pb.RunEvent]
	var err error
	switch {
	case req.Program != nil:
		stream, err = c.c.RunCode(ctx, &pb.RunCodeRequest{Language: req.Program.Language, Code: req.Program.Code, Options: opts})
	case req.Command != nil:
		stream, err = c.c.RunCommand(ctx, &pb.RunCommandRequest{Argv: req.Command.Argv, Shell: req.Command.Shell, Options: opts})
	default:
		return nil, errdefs.ErrInvalidArgument.WithMessage("request: set exactly one of a program and a command")
	}
	if err != nil {
		return nil, fromStatus(err)
	}
	return stream, nil
}

// Attach follows a run from the offsets of its streams, reporting its
// events to obs, until its result.
func (c *Client) Attach(ctx context.Context, id string, stdoutOffset, stderrOffset int64, obs run.Observer) (run.Result, error) {
	return retryElsewhere(c, func(c *Client) (run.Result, error) {
		stream, err := c.c.AttachRun(ctx, &pb.AttachRunRequest{RunId: id, StdoutOffset: stdoutOffset, StderrOffset: stderrOffset})
		if err != nil {
			return run.Result{}, fromStatus(err)
		}
		return follow(stream, obs)
	})
}

// Wait waits until a run has ended.
func (c *Client) Wait(ctx context.Context, id string) (run.Info, error) {
	return retryElsewhere(c, func(c *Client) (run.Info, error) {
		r, err := c.c.WaitRun(ctx, &pb.WaitRunRequest{RunId: id})
		if err != nil {
			return run.Info{}, fromStatus(err)
		}
		return wire.RunFromProto(r), nil
	})
}

// ListRuns reports the caller's running and recent runs, newest first.
func (c *Client) ListRuns(ctx context.Context) ([]run.Info, error) {
	resp, err := c.c.ListRuns(ctx, &pb.ListRunsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	runs := make([]run.Info, len(resp.GetRuns()))
	for i, r := range resp.GetRuns() {
		runs[i] = wire.RunFromProto(r)
	}
	return runs, nil
}

// follow reports a run's stream to obs until its result.
func follow(stream grpc.ServerStreamingClient[pb.RunEvent], obs run.Observer) (run.Result, error) {
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return run.Result{}, errdefs.ErrUnavailable.WithMessage("the daemon ended the run's stream without a result")
		}
		if err != nil {
			return run.Result{}, fromStatus(err)
		}
		if res, done, err := observe(ev, obs); done || err != nil {
			return res, err
		}
	}
}

// observe hands one of a run's events to obs, and says whether it was
// the result, which it returns. An observer that fails means its caller
// is gone: the stream is dropped, and the daemon cancels the run.
func observe(ev *pb.RunEvent, obs run.Observer) (run.Result, bool, error) {
	var err error
	switch e := ev.GetEvent().(type) {
	case *pb.RunEvent_Started:
		err = obs.Started(wire.StartedFromProto(e.Started))
	case *pb.RunEvent_Stdout:
		err = obs.Output(run.Stdout, e.Stdout)
	case *pb.RunEvent_Stderr:
		err = obs.Output(run.Stderr, e.Stderr)
	case *pb.RunEvent_Network:
		err = run.ForwardNetwork(obs, wire.NetworkEventFromProto(e.Network))
	case *pb.RunEvent_Result:
		return wire.ResultFromProto(e.Result), true, nil
	}
	if err != nil {
		return run.Result{}, false, fmt.Errorf("observer: %w", err)
	}
	return run.Result{}, false, nil
}

// Inventory reports the daemon's languages, images, runtimes and limits.
func (c *Client) Inventory(ctx context.Context) (task.Inventory, error) {
	resp, err := c.c.ListImages(ctx, &pb.ListImagesRequest{})
	if err != nil {
		return task.Inventory{}, fromStatus(err)
	}
	inv := task.Inventory{
		Version:        resp.GetVersion(),
		Backend:        resp.GetBackend(),
		BackendVersion: resp.GetEngineVersion(),
		DefaultLimits:  wire.AnsweredLimits(resp.GetDefaultLimits()),
		MaxLimits:      wire.AnsweredLimits(resp.GetMaxLimits()),
		Mounts:         resp.GetMounts(),
	}
	for _, l := range resp.GetLanguages() {
		inv.Languages = append(inv.Languages, images.Language{Name: l.GetName(), Image: l.GetImage(), Command: l.GetCommand()})
	}
	for _, im := range resp.GetImages() {
		inv.Images = append(inv.Images, task.ImageStatus{Name: im.GetName(), Digest: im.GetDigest(), LockedDigest: im.GetLockedDigest(),
			RecipeDigest: im.GetRecipeDigest(), LockedRecipe: im.GetLockedRecipeDigest(), Packages: im.GetPackages()})
	}
	for _, p := range resp.GetPools() {
		st := task.PoolStatus{Image: p.GetImage(), Runtime: p.GetRuntime(), Ready: int(p.GetReady()), Size: int(p.GetSize()), Egress: p.GetEgress(), Preimport: p.GetPreimport(), Failure: p.GetFailure(), Failures: p.GetFailures()}
		if p.GetFailingSince() != nil {
			st.FailingSince = p.GetFailingSince().AsTime()
		}
		inv.Pools = append(inv.Pools, st)
	}
	inv.SigningKeys = resp.GetSigningKeys()
	if inv.Tools, err = wire.ToolSpecsFromProto(resp.GetTools()); err != nil {
		return task.Inventory{}, err
	}
	for _, r := range resp.GetNetworkRules() {
		if rule, err := wire.RuleFromProto(r); err == nil {
			inv.NetworkRules = append(inv.NetworkRules, rule)
		}
	}
	for _, sec := range resp.GetNetworkSecrets() {
		inv.NetworkSecrets = append(inv.NetworkSecrets, netpolicy.Secret{Name: sec.GetName(), Hosts: sec.GetHosts(), Paths: sec.GetPaths(),
			Methods: sec.GetMethods(), ProgramEnv: sec.GetProgramEnv()})
	}
	for _, p := range resp.GetNetworkPolicies() {
		if inv.NetworkPolicies == nil {
			inv.NetworkPolicies = map[string][]netpolicy.Rule{}
		}
		for _, r := range p.GetRules() {
			if rule, err := wire.RuleFromProto(r); err == nil {
				inv.NetworkPolicies[p.GetName()] = append(inv.NetworkPolicies[p.GetName()], rule)
			}
		}
	}
	for _, r := range resp.GetRuntimes() {
		inv.Runtimes = append(inv.Runtimes, task.RuntimeStatus{OCIRuntime: runtime.OCIRuntime{Name: r.GetName(), Version: r.GetVersion()}, Allowed: r.GetAllowed()})
		if r.GetIsDefault() {
			inv.DefaultRuntime = r.GetName()
		}
	}
	return inv, nil
}

// OpenBundle streams a bundle from the daemon.
func (c *Client) OpenBundle(ctx context.Context, digest string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.c.GetBundle(ctx, &pb.GetBundleRequest{Digest: digest})
	return firstChunk(stream, err, cancel)
}

// OpenAttestation reads the signature of the bundle with digest.
func (c *Client) OpenAttestation(ctx context.Context, digest string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.c.GetBundle(ctx, &pb.GetBundleRequest{Digest: digest, Attestation: true})
	return firstChunk(stream, err, cancel)
}

// firstChunk waits for a stream's first chunk, which tells a refusal (a
// missing bundle or file) from content, and reads the rest as it comes.
func firstChunk[T any, PT interface {
	*T
	GetData() []byte
}](stream grpc.ServerStreamingClient[T], err error, cancel context.CancelFunc) (io.ReadCloser, error) {
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, fromStatus(err)
	}
	r := &chunkReader[T, PT]{stream: stream, cancel: cancel}
	if errors.Is(err, io.EOF) {
		r.err = io.EOF
	} else {
		r.buf = PT(first).GetData()
	}
	return r, nil
}

// chunkReader reads the bytes of a stream of chunks.
type chunkReader[T any, PT interface {
	*T
	GetData() []byte
}] struct {
	stream grpc.ServerStreamingClient[T]
	buf    []byte
	cancel context.CancelFunc
	err    error
}

func (r *chunkReader[T, PT]) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		chunk, err := r.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.err = io.EOF
			} else {
				r.err = fromStatus(err)
			}
			continue
		}
		r.buf = PT(chunk).GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *chunkReader[T, PT]) Close() error {
	r.cancel()
	return nil
}

// Get reports a running or recently finished run.
func (c *Client) Get(ctx context.Context, id string) (run.Info, error) {
	return retryElsewhere(c, func(c *Client) (run.Info, error) {
		resp, err := c.c.GetRun(ctx, &pb.GetRunRequest{RunId: id})
		if err != nil {
			return run.Info{}, fromStatus(err)
		}
		return wire.RunFromProto(resp), nil
	})
}

// Cancel kills a running run; it returns the run's state before the call.
func (c *Client) Cancel(ctx context.Context, id string) (run.State, error) {
	return retryElsewhere(c, func(c *Client) (run.State, error) {
		resp, err := c.c.CancelRun(ctx, &pb.CancelRunRequest{RunId: id})
		if err != nil {
			return 0, fromStatus(err)
		}
		return wire.RunStateFromProto(resp.GetState()), nil
	})
}

// fromStatus turns a gRPC error back into the engine's error classes, and
// a missing image into the engine's ImageMissingError.
func fromStatus(err error) error {
	for _, d := range status.Convert(err).Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		switch {
		case ok && info.GetReason() == wire.ReasonImageNotPresent:
			return &task.ImageMissingError{Ref: info.GetMetadata()["image"]}
		case ok && info.GetReason() == wire.ReasonElsewhere:
			m := info.GetMetadata()
			return &task.ElsewhereError{What: m["kind"], ID: m["id"], Peer: cluster.Peer{Name: m["daemon"], Addr: m["address"]}}
		}
	}
	return errgrpc.ToNative(err)
}

// retryElsewhere makes a call, and makes it once more on the daemon that
// an ElsewhereError of the first names: in a cluster, the one that holds
// the run or session.
func retryElsewhere[T any](c *Client, call func(*Client) (T, error)) (T, error) {
	v, err := call(c)
	var where *task.ElsewhereError
	if !errors.As(err, &where) || c.dial == nil {
		return v, err
	}
	peer, perr := c.peer(where.Peer.Addr)
	if perr != nil {
		return v, fmt.Errorf("%w (and it could not be reached: %v)", err, perr)
	}
	return call(peer)
}

// markFollowed marks the streams of a peer's connection: runs are the
// calls the daemon may send on.
func markFollowed(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, wire.FollowedHeader, "1"), desc, cc, method, opts...)
}

// peer is a client of the daemon at addr, dialled as c was (its TLS
// checks the name c's daemon has), and kept for the next call.
func (c *Client) peer(addr string) (*Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.peers[addr]; ok {
		return p, nil
	}
	o := *c.dial
	o.Socket, o.Addr = "", addr
	if o.TLS != nil {
		o.TLS = o.TLS.Clone()
		if o.TLS.ServerName == "" {
			o.TLS.ServerName, _, _ = net.SplitHostPort(c.dial.Addr)
		}
	}
	p, err := dialOnce(o, grpc.WithChainStreamInterceptor(markFollowed))
	if err != nil {
		return nil, err
	}
	if c.peers == nil {
		c.peers = map[string]*Client{}
	}
	c.peers[addr] = p
	return p, nil
}
