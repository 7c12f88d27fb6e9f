package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/artifacts/provenance"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/cluster"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/inbound"
	"github.com/sandboxd/sandboxd/internal/edge/budget"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/internal/host/claim"
	"github.com/sandboxd/sandboxd/internal/host/hostview"
	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/netpolicy/gateway"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/containerd"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/runtime/docker"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/tools"
)

func runServe(args []string, _, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs := verbFlags("serve", stderr)
	cfg.register(fs)
	if err := parseSettings(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badUsage("unexpected arguments %q: serve takes flags only", fs.Args())
	}
	if err := cfg.loadCatalog(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("serve runs as root: it mounts a tmpfs per task, makes cgroups and drives the backend (run it with sudo, or as the systemd service)")
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serve(ctx, cfg, log)
}

// newLogger logs at level in format, both checked by Config.Validate.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		opts.ReplaceAttr = millis
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// millis writes a duration as KEY_ms, milliseconds in a number: JSON's
// readers (jq, a log pipeline) compute with it, where slog's default is
// nanoseconds under a name that does not say so.
func millis(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
	}
	return a
}

// peersEvery is how often the daemon reads its peers from the Kubernetes
// API: a new pod is known to the others within it.
const peersEvery = 5 * time.Second

// tokenCallerName names the caller of --token-file.
const tokenCallerName = "token"

// serve runs the daemon until ctx is done, then shuts it down: it stops
// accepting calls, cancels running tasks, waits for their containers to be
// removed, and returns nil.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	token := ""
	if cfg.TokenFile != "" {
		var err error
		if token, err = readToken(cfg.TokenFile); err != nil {
			return err
		}
	}
	if cfg.EgressSecrets != "" {
		list, err := loadSecrets(cfg.EgressSecrets)
		if err != nil {
			return err
		}
		cfg.Task.Network.Secrets = netpolicy.NewSecrets(list)
	}
	var cl closers
	defer cl.close(log)
	var inboundLis net.Listener
	if cfg.InboundListen != "" {
		// Before the engine: an opened port's URL names the address.
		var err error
		if inboundLis, err = net.Listen("tcp", cfg.InboundListen); err != nil {
			return err
		}
		cl.push("the inbound listener", func() error {
			if err := inboundLis.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		})
		if cfg.Task.InboundURL == "" {
			_, port, _ := net.SplitHostPort(inboundLis.Addr().String())
			cfg.Task.InboundURL = "http://{token}.localhost:" + port + "/"
		}
	}
	co, err := openCollaborators(ctx, cfg, &cl, log)
	if err != nil {
		return err
	}
	svc, closeEngine, err := newEngine(ctx, cfg, log, co.options...)
	if err != nil {
		return err
	}
	cl.push("the engine", func() error { closeEngine(); return nil })
	ids, err := identities(cfg, svc, token, log)
	if err != nil {
		return err
	}
	ls := &listeners{hs: server.NewHealth(), errc: make(chan error, 8), log: log}
	if err := ls.start(ctx, cfg, svc, ids, co, &cl); err != nil {
		return err
	}
	if inboundLis != nil {
		ls.serveHTTP(inboundLis, inbound.New(svc, log))
		log.Info("serving the inbound proxy", "addr", inboundLis.Addr().String(), "url", cfg.Task.InboundURL)
	}
	rl := &reloader{rs: reloads(cfg, svc, ids, token != "", ls, co.keys, log), log: log}
	go rl.onHangup(ctx)
	go rl.watch(ctx, watchEvery)
	go trimWhenQuiet(ctx, svc, quietAfter)
	// Every listener serves: a systemd unit of Type=notify starts what
	// depends on the daemon now, not when the process began.
	if err := notifySystemd("READY=1\nSTATUS=serving"); err != nil {
		log.Warn("tell systemd the daemon is ready", "err", err)
	}
	select {
	case <-ctx.Done():
	case err := <-ls.errc:
		log.Error("a listener failed; shutting down", "err", err)
	}
	notifySystemd("STOPPING=1\nSTATUS=draining and stopping")
	stop(cfg, svc, ls, log)
	return nil
}

// collaborators are what the engine and the listeners share besides the
// engine itself: the audit log, the metrics registry, and the engine's
// options for them (and for the peers of a cluster).
type collaborators struct {
	audit   *audit.Log
	metrics *prometheus.Registry
	// grpcMetrics count the gRPC listeners' calls, in metrics.
	grpcMetrics *grpcprom.ServerMetrics
	keys        *provenance.Keyring
	options     []task.Option
}

// newMetrics is the daemon's metrics registry, with the Go runtime's, the
// process's, the build's and the gRPC listeners' metrics in it.
func newMetrics(grpcHistograms bool) (*prometheus.Registry, *grpcprom.ServerMetrics) {
	var opts []grpcprom.ServerMetricsOption
	if grpcHistograms {
		opts = append(opts, grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.001, 4, 10))))
	}
	reg, m := prometheus.NewRegistry(), grpcprom.NewServerMetrics(opts...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(), m)
	return reg, m
}

// openCollaborators opens what the configuration asks for; cl closes it.
func openCollaborators(ctx context.Context, cfg Config, cl *closers, log *slog.Logger) (collaborators, error) {
	var co collaborators
	// Every bundle is signed with this daemon's key, made at first start.
	keys, err := provenance.Open(signingDir(cfg))
	if err != nil {
		return co, fmt.Errorf("signing key: %w", err)
	}
	co.keys = keys
	co.options = append(co.options, task.WithSigning(keys))
	if cfg.AuditLog != "" {
		l, err := audit.Open(cfg.AuditLog, cfg.Audit)
		if err != nil {
			return co, err
		}
		cl.push("the audit log", l.Close)
		co.audit = l
		co.options = append(co.options, task.WithAudit(l))
	}
	if len(cfg.ToolServers) > 0 {
		reg, err := openToolServers(cfg, cl, log)
		if err != nil {
			return co, err
		}
		co.options = append(co.options, task.WithTools(reg, tools.DefaultLimits()))
	}
	if cfg.MetricsListen != "" {
		co.metrics, co.grpcMetrics = newMetrics(cfg.GRPCHistograms)
		co.options = append(co.options, task.WithMetrics(co.metrics))
	}
	if cfg.PeersService != "" {
		k, err := cluster.InCluster(cfg.PeersService, cfg.PeersPort)
		if err != nil {
			return co, fmt.Errorf("--peers-service: %w", err)
		}
		peers := &cluster.Peers{}
		go cluster.Watch(ctx, k, cfg.Task.Node, peers, peersEvery, log)
		co.options = append(co.options, task.WithPeers(peers))
	}
	return co, nil
}

// identities names the callers of the network listeners: the token's, and
// the tenants of --tenants (reloaded on SIGHUP, see reloads).
func identities(cfg Config, svc *task.Service, token string, log *slog.Logger) (*access.Identities, error) {
	ids := access.NewIdentities(token, access.Caller{Name: tokenCallerName, Mounts: cfg.TokenMounts}, cfg.TLS.CAFile != "")
	if cfg.Tenants == "" {
		return ids, nil
	}
	tenants, err := loadTenants(cfg.Tenants, svc, token != "")
	if err != nil {
		return nil, err
	}
	ids.Set(tenants)
	log.Info("tenants loaded", "file", cfg.Tenants, "tenants", len(tenants))
	return ids, nil
}

// listeners are the daemon's servers: gRPC on the socket and on TCP, MCP
// over Streamable HTTP, and the metrics; errc gets the first that fails.
type listeners struct {
	hs   *health.Server
	tls  *tlsconf.Reloadable // of the TCP listeners, if TLS
	mcp  []*mcp.Server
	grpc []*grpc.Server
	http []*http.Server
	errc chan error
	log  *slog.Logger
}

// start serves every listener the configuration names.
func (ls *listeners) start(ctx context.Context, cfg Config, svc *task.Service, ids *access.Identities, co collaborators, cl *closers) error {
	srv := server.New(svc)
	maxRecv := int(cfg.Task.Bounds.MessageBytes())
	// One budget for what the requests in flight hold, on every listener.
	requests := budget.New(cfg.RequestMemory, cfg.RequestCalls)
	log := ls.log
	if cfg.Socket != "" {
		lis, err := listenUnix(cfg.Socket, cfg.SocketGroup, log)
		if err != nil {
			return err
		}
		cl.push("the socket", func() error {
			// Closing the listener unlinks it; this is for one that never
			// closed.
			if err := os.Remove(cfg.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
		// The socket's owner and group are its access control: no token
		// on it, and its callers are the operator.
		ls.serveGRPC(lis, server.NewGRPCServer(srv, ls.hs, server.Options{Caller: access.Operator, MaxRecvBytes: maxRecv,
			Budget: requests, ReadTimeout: cfg.ReadTimeout, Metrics: co.grpcMetrics, Log: log}))
		log.Info("serving gRPC", "socket", cfg.Socket)
	}
	// grpcTLS and mcpTLS take the newest certificate SIGHUP read.
	var grpcTLS, mcpTLS *tls.Config
	scheme := "http"
	if cfg.TLS.CertFile != "" {
		// Callers by token need no certificate: one given is still
		// verified, and a call that names no caller is refused.
		byToken := cfg.TLS.CAFile != "" && (cfg.TokenFile != "" || cfg.Tenants != "")
		var err error
		if ls.tls, err = tlsconf.NewReloadable(cfg.TLS, byToken); err != nil {
			return err
		}
		grpcTLS, mcpTLS = ls.tls.Config("h2"), ls.tls.Config()
		scheme = "https"
	}
	if cfg.Listen != "" {
		lis, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return err
		}
		ls.serveGRPC(lis, server.NewGRPCServer(srv, ls.hs, server.Options{Identities: ids, MaxRecvBytes: maxRecv,
			Budget: requests, ReadTimeout: cfg.ReadTimeout, TLS: grpcTLS, Audit: co.audit, Metrics: co.grpcMetrics, Log: log}))
		log.Info("serving gRPC", "addr", lis.Addr().String(), "tls", grpcTLS != nil, "client_certs", cfg.TLS.CAFile != "")
	}
	if cfg.MCPListen != "" {
		lis, err := net.Listen("tcp", cfg.MCPListen)
		if err != nil {
			return err
		}
		if mcpTLS != nil {
			lis = tls.NewListener(lis, mcpTLS)
		}
		opts := mcp.Options{Version: version, OutputBytes: cfg.MCPOutputBytes, Wait: cfg.MCPWait, Log: log}
		if co.metrics != nil {
			opts.Metrics = co.metrics
		}
		ms, err := mcp.NewServer(ctx, svc, opts)
		if err != nil {
			return err
		}
		ls.mcp = append(ls.mcp, ms)
		var h http.Handler = mcp.HTTPHandler(ms, mcp.HTTPOptions{Identities: ids, AllowedHosts: cfg.MCPAllowedHosts,
			AllowedOrigins: cfg.MCPAllowedOrigins, MaxBodyBytes: mcp.BodyBytes(cfg.Task.Bounds.MessageBytes()),
			Budget: requests, ReadTimeout: cfg.ReadTimeout, Audit: co.audit, Log: log})
		if co.metrics != nil {
			h = countHTTP(co.metrics, h)
		}
		ls.serveHTTP(lis, h)
		log.Info("serving MCP over Streamable HTTP", "url", scheme+"://"+lis.Addr().String()+mcp.Path)
	}
	if co.metrics != nil {
		lis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(co.metrics, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
		mux.Handle("/readyz", readyz{ls.hs})
		ls.serveHTTP(lis, mux)
		log.Info("serving Prometheus metrics and probes", "url", "http://"+lis.Addr().String(), "paths", "/metrics /healthz /readyz")
	}
	return nil
}

func (ls *listeners) serveGRPC(lis net.Listener, g *grpc.Server) {
	ls.grpc = append(ls.grpc, g)
	go func() { ls.errc <- g.Serve(lis) }()
}

func (ls *listeners) serveHTTP(lis net.Listener, h http.Handler) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ls.http = append(ls.http, hs)
	go func() { ls.errc <- hs.Serve(lis) }()
}

// stop drains the engine if the operator asked for it, then stops the
// listeners gracefully while the engine cancels its runs and removes their
// containers; listeners still busy at the shutdown timeout are cut.
func stop(cfg Config, svc *task.Service, ls *listeners, log *slog.Logger) {
	ls.hs.Shutdown()
	if cfg.DrainTimeout > 0 {
		log.Info("draining: new runs and sessions are refused; running tasks may end", "for", cfg.DrainTimeout)
		drainCtx, cancelDrain := context.WithTimeout(context.Background(), cfg.DrainTimeout)
		err := svc.Drain(drainCtx)
		cancelDrain()
		if err != nil {
			log.Warn("drained in part", "err", err)
		}
	}
	log.Info("shutting down: cancelling running tasks")
	shutCtx, cancelShut := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelShut()
	stopped := make(chan struct{})
	go func() {
		for _, g := range ls.grpc {
			g.GracefulStop()
		}
		for _, h := range ls.http {
			h.Shutdown(shutCtx)
		}
		close(stopped)
	}()
	if err := svc.Shutdown(shutCtx); err != nil {
		log.Error("running tasks were not cleaned up in time", "err", err)
	}
	select {
	case <-stopped:
	case <-shutCtx.Done():
		for _, g := range ls.grpc {
			g.Stop()
		}
	}
	log.Info("stopped")
}

// closingRuntime is a backend that releases its client of Docker or
// containerd and what it keeps for itself when done.
type closingRuntime interface {
	runtime.Runtime
	Close() error
}

// newEngine builds the engine as the configuration says: the image lock,
// the bundle store, the backend, and the task service, which removes what
// an earlier instance of the same name left behind. Call the returned
// function after the service has shut down.
func newEngine(ctx context.Context, cfg Config, log *slog.Logger, opts ...task.Option) (_ *task.Service, _ func(), err error) {
	var cl closers
	defer func() {
		if err != nil {
			cl.close(log)
		}
	}()
	held, err := takeClaim(&cfg, log)
	if err != nil {
		return nil, nil, err
	}
	cl.push("the claim", held.Release)
	// Absolute, as logs and refusals name it.
	if abs, err := filepath.Abs(cfg.ImagesLock); err == nil {
		cfg.ImagesLock = abs
	}
	lock := images.OpenLock(cfg.ImagesLock)
	lock.OnChange(func(prev, next images.Lock) {
		added, removed, rebuilt := images.Changes(prev, next)
		log.Info("image lock changed", "path", cfg.ImagesLock, "images", len(next.Images), "added", added, "removed", removed, "rebuilt", rebuilt)
	})
	taskOpts := append([]task.Option{task.WithLogger(log), task.WithLock(lock)}, opts...)
	if _, err := os.Stat(cfg.ImagesLock); errors.Is(err, fs.ErrNotExist) && len(cfg.Task.AllowedImages) == 0 {
		log.Warn("no image lock: no image may run until sandboxd image build (scripts/setup.sh) writes it, or --allow-image names one", "path", cfg.ImagesLock)
	}
	cfg.Task.Version = version
	store, err := artifacts.OpenStore(cfg.ArtifactsDir, cfg.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("artifact store: %w", err)
	}
	taskOpts = append(taskOpts, task.WithArtifacts(store))
	if err := checkBackendSees(cfg, log); err != nil {
		return nil, nil, err
	}
	initPath, unmountInit, err := installInit(cfg.InitPath, cfg.Task.StateDir, cfg.Task.Instance)
	if err != nil {
		return nil, nil, err
	}
	cl.push("the init's tmpfs", unmountInit)
	cfg.InitPath = initPath
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	gw, err := startGateway(startCtx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	var linker runtime.EgressGateway // nil unless there is a gateway
	if gw != nil {
		cl.push("the egress gateway", gw.Close)
		linker = gw
		taskOpts = append(taskOpts, task.WithEgress(gw))
	}
	cgroupParent := cgroup.InstanceParent(cfg.Task.Instance)
	var rt closingRuntime
	switch cfg.Backend {
	case "containerd":
		runDir := containerdRunDir(cfg)
		rt, err = containerd.Connect(startCtx, containerd.Options{
			Address: cfg.ContainerdAddress, Namespace: cfg.ContainerdNamespace, InitPath: cfg.InitPath,
			NetnsDir: filepath.Join(runDir, "netns", cfg.Task.Instance), FIFODir: filepath.Join(runDir, "fifo", cfg.Task.Instance),
			RunscPath: cfg.RunscPath, RunscRoot: "/run/containerd/runsc",
			CgroupRoot: cfg.CgroupRoot, CgroupParent: cgroupParent, Egress: linker, Log: log,
		})
	case direct.Name:
		rt, err = direct.New(direct.Options{
			StateDir: DirectStateDir(cfg.Task.Instance), ImageDir: cfg.ImageStore,
			InitPath: cfg.InitPath, RunscPath: cfg.RunscPath,
			CgroupRoot: cfg.CgroupRoot, CgroupParent: cgroupParent, Egress: linker, Version: version, Log: log,
		})
	default:
		rt, err = docker.Connect(startCtx, docker.Options{
			Host: cfg.DockerHost, InitPath: cfg.InitPath, CgroupRoot: cfg.CgroupRoot, CgroupParent: cgroupParent,
			Egress: linker, Instance: cfg.Task.Instance, Log: log,
		})
	}
	if err != nil {
		return nil, nil, err
	}
	cl.push("the backend", rt.Close)
	svc, err := task.New(startCtx, rt, cfg.Task, taskOpts...)
	if err != nil {
		return nil, nil, err
	}
	return svc, func() { cl.close(log) }, nil
}

// closer is one resource of the daemon's, named for the log.
type closer struct {
	name  string
	close func() error
}

// closers are the resources a daemon acquired, in order; close releases
// them once, in reverse, whether the start failed midway or the daemon
// stops.
type closers []closer

func (c *closers) push(name string, fn func() error) { *c = append(*c, closer{name, fn}) }

func (c *closers) close(log *slog.Logger) {
	for i := len(*c) - 1; i >= 0; i-- {
		if err := (*c)[i].close(); err != nil {
			log.Warn("close "+(*c)[i].name, "err", err)
		}
	}
	*c = nil
}

// takeClaim claims the daemon's instance, uid range and (when it runs an
// egress gateway) egress subnet on the host, before anything of the host is
// touched: a second daemon of the same instance would reap the first's
// containers and folders, and two daemons sharing uids would share per-uid
// limits, files and signals. The defaults move to the next free block, so
// that instances started with them do not collide; what the operator chose
// is refused when a live daemon holds an overlap.
func takeClaim(cfg *Config, log *slog.Logger) (*claim.Claim, error) {
	r := claim.Request{
		Instance: cfg.Task.Instance, UIDFirst: cfg.Task.UIDs.First, UIDCount: cfg.Task.UIDs.Count,
		MoveUIDs: cfg.Task.UIDs == hostuid.DefaultRange(),
	}
	if cfg.Task.Network.AllowsNetwork() {
		r.Subnet, r.MoveSubnet = cfg.EgressSubnet, cfg.EgressSubnet == gateway.DefaultSubnet
	}
	c, err := claim.Take(cfg.ClaimsDir, r)
	if err != nil {
		return nil, fmt.Errorf("claim what this daemon uses of the host: %w", err)
	}
	if c.UIDFirst != r.UIDFirst {
		log.Info("the default uid range is another daemon's: this one takes the next free block", "uid_range", fmt.Sprintf("%d:%d", c.UIDFirst, c.UIDCount))
		cfg.Task.UIDs.First = c.UIDFirst
	}
	if c.Subnet != r.Subnet.Masked() {
		log.Info("the default egress subnet is another daemon's: this one takes the next free one", "egress_subnet", c.Subnet)
		cfg.EgressSubnet = c.Subnet
	}
	return c, nil
}

// DirectStateDir is the direct backend's state folder of the daemon
// named instance: its containers' bundles and its OCI runtimes' state, on
// the host's tmpfs, which a reboot empties as it ends every container.
func DirectStateDir(instance string) string { return filepath.Join("/run/sandboxd/direct", instance) }

// containerdRunDir is where the containerd backend pins network namespaces
// and keeps stdio FIFOs: beside the socket, a folder the host's containerd
// sees at the same path when this daemon runs in a container of its own.
func containerdRunDir(cfg Config) string {
	if cfg.Socket == "" {
		return "/run/sandboxd"
	}
	return filepath.Dir(cfg.Socket)
}

// checkBackendSees refuses to start a daemon whose backend's daemon would
// not see the folders it mounts for containers (the state folder: task folders and the
// init; for containerd, the run folder: pinned network namespaces), before
// it mounts anything. Such a daemon would serve, and every container would
// fail with an OCI runtime error that names neither cause nor fix.
func checkBackendSees(cfg Config, log *slog.Logger) error {
	if cfg.Backend == direct.Name {
		return nil // the daemon runs the OCI runtime in its own mount namespace
	}
	sock, dirs := cfg.ContainerdAddress, []string{cfg.Task.StateDir, containerdRunDir(cfg)}
	if cfg.Backend != "containerd" {
		sock, dirs = dockerSocket(cfg.DockerHost), []string{cfg.Task.StateDir}
	}
	if sock == "" {
		log.Info("the backend's daemon is not on a unix socket: not checked that it sees sandboxd's mounts", "backend", cfg.Backend)
		return nil
	}
	res, err := hostview.Check(sock, dirs)
	if err != nil {
		return fmt.Errorf("%s backend: %w", cfg.Backend, err)
	}
	if cfg.Backend == "docker" && cfg.Task.Network.AllowsNetwork() && res.DaemonPID == 0 {
		// An allow-listed container's network namespace is reached
		// through its init's process; from another PID namespace, only
		// through dockerd's bind mount, which a container's mount
		// namespace rarely shares.
		return fmt.Errorf("docker backend: allow-listed tasks need the network namespace of each container, which sandboxd enters through the container's process: "+
			"it runs in another PID namespace than dockerd (%s), so it would fail every allow-listed run. Run sandboxd in the host's PID namespace "+
			"(--pid=host, hostPID: true), or allow no network (drop --egress-allow, --egress-policy): %w", res.Unchecked, errdefs.ErrFailedPrecondition)
	}
	switch {
	case res.Unchecked != "":
		log.Info("not checked that the backend's daemon sees sandboxd's mounts", "backend", cfg.Backend, "why", res.Unchecked)
	case !res.SameNamespace:
		log.Info("the backend's daemon runs in another mount namespace and sees sandboxd's mounts", "backend", cfg.Backend, "daemon_pid", res.DaemonPID, "folders", dirs)
	}
	return nil
}

// dockerSocket is the path of dockerd's unix socket, as the client would
// find it from --docker-host or DOCKER_HOST, or "" when dockerd is reached
// otherwise (TCP, SSH).
func dockerSocket(host string) string {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		return "/var/run/docker.sock"
	}
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		return path
	}
	return ""
}

// quietAfter is how long the daemon waits without runs before it gives
// memory back.
const quietAfter = 5 * time.Second

// trimWhenQuiet returns the heap the last burst of runs grew to the system
// once the daemon has been quiet for a while, once per burst: Go's runtime
// would otherwise hand it back only slowly.
func trimWhenQuiet(ctx context.Context, svc *task.Service, after time.Duration) {
	tick := time.NewTicker(after)
	defer tick.Stop()
	var seen, trimmed uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		started, active := svc.Activity()
		if active == 0 && started == seen && started != trimmed {
			debug.FreeOSMemory()
			trimmed = started
		}
		seen = started
	}
}

// installInit copies the init onto a tmpfs of this instance's own in the
// state folder, named by its digest, and returns the copy's path and what
// unmounts it. Containers bind that copy: the backend finds it at the same
// path even when this daemon runs in a container of its own, rebuilding the
// binary does not change it under a running container, and a container's
// mountinfo shows it as a file of a tmpfs, not as a path of the host.
func installInit(src, stateDir, instance string) (string, func() error, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", nil, fmt.Errorf("sandboxd's init %s is missing (make build builds it): %w", src, err)
	}
	dir := filepath.Join(stateDir, "init", instance)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	// A daemon killed with -9 left its tmpfs mounted.
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); err != nil {
		return "", nil, fmt.Errorf("mount a tmpfs for the init: %w", err)
	}
	unmount := func() error { return unix.Unmount(dir, unix.MNT_DETACH) }
	sum := sha256.Sum256(b)
	dst := filepath.Join(dir, "sandboxd-init-"+hex.EncodeToString(sum[:8]))
	if err := os.WriteFile(dst, b, 0o555); err != nil {
		unmount()
		return "", nil, err
	}
	return dst, unmount, nil
}

// socketGroupNone as --socket-group leaves the socket to root alone.
const socketGroupNone = "none"

// listenUnix listens on a unix socket that only root and the group may
// use (mode 0660, or 0600 without such a group), replacing a stale socket
// file but refusing to steal one a live daemon still serves.
func listenUnix(path, group string, log *slog.Logger) (net.Listener, error) {
	gid, mode := -1, os.FileMode(0o600)
	if group != "" && group != socketGroupNone {
		g, err := user.LookupGroup(group)
		if err != nil {
			log.Warn("the socket's group does not exist: only root may use the socket", "group", group, "err", err)
		} else if gid, err = strconv.Atoi(g.Gid); err == nil {
			mode = 0o660
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another daemon serves %s", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// Made with no permission at all, then opened to the group: no moment
	// in which anyone else may connect.
	old := unix.Umask(0o777)
	lis, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(path, 0, gid); err != nil {
		lis.Close()
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// startGateway starts the egress gateway when the operator allows network
// rules, and returns nil otherwise. No task may reach the daemon's own
// listeners through it.
func startGateway(ctx context.Context, cfg Config, log *slog.Logger) (*gateway.Gateway, error) {
	if !cfg.Task.Network.AllowsNetwork() {
		return nil, nil
	}
	var deny []netip.Prefix
	for _, addr := range []string{cfg.Listen, cfg.MCPListen, cfg.InboundListen} {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
				deny = append(deny, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			}
		}
	}
	roots, err := upstreamRoots(cfg.EgressCAFile)
	if err != nil {
		return nil, err
	}
	gw, err := gateway.Start(ctx, gateway.Config{
		Instance: cfg.Task.Instance, RunDir: cfg.EgressRunDir, Subnet: cfg.EgressSubnet,
		Operator: cfg.Task.Network, Deny: deny, Secrets: cfg.Task.Network.Secrets, UpstreamRoots: roots, Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("egress gateway: %w", err)
	}
	return gw, nil
}

// watchEvery is how often the daemon looks for a changed certificate,
// token or tenants file: a stat of each, so cheap, and well inside any
// rotation's overlap.
const watchEvery = 5 * time.Second

// signingDir holds the instance's signing keys.
func signingDir(cfg Config) string {
	return filepath.Join(cfg.Task.StateDir, "signing", cfg.Task.Instance)
}

// buildInfo is sandboxd_build_info: 1, labelled with the version and the
// Go it was built with, so that dashboards can tell daemons apart.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandboxd_build_info", Help: "Always 1: the daemon's version and Go version."},
		[]string{"version", "goversion"})
	g.WithLabelValues(version, goruntime.Version()).Set(1)
	return g
}

// readyz answers an HTTP readiness probe as the gRPC health service
// answers: 200 while serving, 503 while draining or shutting down.
// /healthz, liveness, is 200 while the process serves HTTP at all.
type readyz struct{ hs *health.Server }

func (r readyz) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	resp, err := r.hs.Check(req.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "not ready: draining or shutting down\n")
		return
	}
	io.WriteString(w, "ready\n")
}

// countHTTP counts the MCP endpoint's requests by HTTP method and status
// (401s and 403s at the door included) and times them: MCP's calls are
// JSON-RPC in the bodies, which this does not read.
func countHTTP(reg prometheus.Registerer, h http.Handler) http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_mcp_http_requests_total", Help: "Requests to the MCP endpoint, by HTTP method and status code.",
	}, []string{"method", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandboxd_mcp_http_request_duration_seconds", Help: "Time to answer MCP requests (a stream's whole life for GET).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"method"})
	reg.MustRegister(requests, duration)
	return promhttp.InstrumentHandlerCounter(requests, promhttp.InstrumentHandlerDuration(duration, h))
}
