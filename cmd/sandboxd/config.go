package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/internal/host/claim"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/netpolicy/gateway"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
)

// Config is the daemon's configuration: every field has a flag of the
// serve command and a default.
type Config struct {
	// Socket is the unix socket the daemon serves gRPC on, to root and
	// SocketGroup only (mode 0660); its callers are the operator.
	Socket string
	// SocketGroup is the group that may use the socket besides root;
	// without such a group, or with socketGroupNone, only root may.
	SocketGroup string
	// Listen is an optional TCP address for gRPC, such as 127.0.0.1:7070.
	Listen string
	// TokenFile holds the bearer token that callers of every network
	// listener (Listen, MCPListen) must send; required with either,
	// unless TLS.CAFile asks every client for a certificate.
	TokenFile string
	// TLS, when TLS.CertFile is set, serves the network listeners over TLS;
	// TLS.CAFile makes it mutual. InsecureListen allows a listener off
	// loopback without TLS.
	TLS            tlsconf.Files
	InsecureListen bool
	// TokenMounts are the operator mounts that callers with the token may
	// ask for; the socket's callers may ask for every mount.
	TokenMounts []string
	// PeersService, in Kubernetes, is the Service whose EndpointSlices list
	// the daemon's peers, and PeersPort the name of its gRPC port.
	PeersService, PeersPort string
	// Tenants is a JSON file naming the callers of the network listeners,
	// with their quotas and grants; SIGHUP reloads it.
	Tenants string
	// RequestMemory bounds what the requests in flight hold together, on
	// every listener; RequestCalls bounds how many calls that run tasks
	// are in flight.
	RequestMemory int64
	RequestCalls  int
	// ReadTimeout bounds how long a request may take to arrive.
	ReadTimeout time.Duration
	// Backend runs the containers: docker, containerd, or direct (the OCI
	// runtime run by the daemon itself, with no engine).
	Backend string
	// DockerHost is dockerd's address; empty means DOCKER_HOST
	// or the default socket.
	DockerHost string
	// ContainerdAddress is containerd's socket (backend containerd).
	ContainerdAddress string
	// ContainerdNamespace is the containerd namespace of images and tasks.
	ContainerdNamespace string
	// InitPath is sandboxd's static init (sandboxd-init), bound into each
	// container as PID 1.
	InitPath string
	// RunscPath is gVisor's runsc (backends containerd and direct; Docker
	// is told of runsc in its own configuration).
	RunscPath string
	// ImageStore is the direct backend's image store.
	ImageStore string
	// CgroupRoot is where the cgroup file system is mounted; peak memory
	// is read from there.
	CgroupRoot string
	// ImagesLock is the lock file written when the images were built.
	ImagesLock string
	// ImagesDir holds the operator's recipes, one folder each, besides
	// the built-in ones; SIGHUP reloads it.
	ImagesDir string
	// DrainTimeout is how long SIGTERM lets running tasks end before it
	// cancels them; meanwhile health says NOT_SERVING and new runs and
	// sessions are refused with a retry hint. 0 cancels them at once.
	DrainTimeout time.Duration
	// ShutdownTimeout bounds how long SIGTERM waits for running tasks to
	// be cancelled and cleaned up.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text (logfmt) or json, a JSON object a line.
	LogFormat string
	// MCPListen is an optional TCP address for MCP over Streamable HTTP, at
	// path /mcp.
	MCPListen string
	// MCPAllowedHosts are Host names the MCP endpoint accepts besides
	// loopback names.
	MCPAllowedHosts []string
	// MCPAllowedOrigins are browser origins that may call the MCP endpoint.
	MCPAllowedOrigins []string
	// ToolServers are the operator's MCP servers whose tools programs may
	// call, NAME=URL or NAME=COMMAND; ToolTokens name files holding their
	// bearer tokens, NAME=FILE (see docs/tools.md).
	ToolServers []string
	ToolTokens  []string
	// MCPOutputBytes is how much of each stream an MCP tool result carries.
	MCPOutputBytes int64
	// MCPWait is how long an MCP tool call waits for its run before it
	// answers RUNNING; 0 waits for the end.
	MCPWait time.Duration
	// ArtifactsDir holds the bundle store.
	ArtifactsDir string
	// Store configures the bundle store.
	Store artifacts.StoreOptions
	// InboundListen, when set, is the TCP address of the inbound proxy,
	// which serves the ports sessions open (see docs/processes.md).
	InboundListen string
	// MetricsListen, when set, is the TCP address of the Prometheus
	// metrics endpoint, /metrics.
	MetricsListen string
	// GRPCHistograms adds the gRPC calls' latency histograms to the
	// metrics: 11 series a method, which a scraper pays for.
	GRPCHistograms bool
	// AuditLog, when set, is the file of the audit log, rotated as Audit
	// says.
	AuditLog string
	Audit    audit.Options
	// EgressSubnet is where the egress gateway and the containers of
	// allow-listed tasks have their addresses; EgressRunDir holds the
	// gateway's namespace and resolv.conf. The gateway runs only when the
	// operator allows network rules (Task.Network).
	EgressSubnet netip.Prefix
	EgressRunDir string
	// EgressSecrets is the operator's secrets file (netpolicy.ParseSecrets),
	// read again on SIGHUP and when it or a value's file changes;
	// EgressCAFile adds certificates the gateway trusts, besides the
	// system's, when it verifies a host it adds a secret for.
	EgressSecrets string
	EgressCAFile  string
	// ClaimsDir is the host-wide folder where the daemons of a host claim
	// their instance, uid range and egress subnet before they touch
	// anything (see internal/host/claim).
	ClaimsDir string
	// Task is the engine's configuration.
	Task task.Config
}

// DefaultConfig is the configuration of `sandboxd serve` with no flags.
func DefaultConfig() Config {
	return Config{
		Socket:              "/run/sandboxd/sandboxd.sock",
		SocketGroup:         "sandboxd",
		RequestMemory:       512 << 20,
		RequestCalls:        256,
		ReadTimeout:         30 * time.Second,
		Backend:             direct.Name,
		ContainerdAddress:   "/run/containerd/containerd.sock",
		ContainerdNamespace: "sandboxd",
		InitPath:            defaultInitPath(),
		RunscPath:           "/usr/local/lib/sandboxd/runsc",
		ImageStore:          direct.DefaultImageDir,
		CgroupRoot:          "/sys/fs/cgroup",
		ImagesLock:          images.DefaultLockPath,
		ShutdownTimeout:     30 * time.Second,
		LogLevel:            "info",
		LogFormat:           "text",
		ArtifactsDir:        "/var/lib/sandboxd/artifacts",
		MCPOutputBytes:      mcp.DefaultOutputBytes,
		MCPWait:             50 * time.Second,
		PeersPort:           "grpc",
		Store:               artifacts.DefaultStoreOptions(),
		Audit:               audit.Options{MaxBytes: 64 << 20, Keep: 8},
		EgressSubnet:        gateway.DefaultSubnet,
		EgressRunDir:        "/run/sandboxd/egress",
		ClaimsDir:           claim.DefaultDir,
		GRPCHistograms:      true,
		Task:                task.DefaultConfig(),
	}
}

// loadCatalog reads the built-in recipes and those of --images-dir into
// the engine's catalog.
func (c *Config) loadCatalog() error {
	catalog, err := images.WithDir(c.ImagesDir)
	if err != nil {
		return err
	}
	c.Task.Catalog = catalog
	return nil
}

// Validate rejects contradictions the engine would not catch.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf(format, args...))
	}
	if c.Backend != "docker" && c.Backend != "containerd" && c.Backend != direct.Name {
		return bad("--backend %q: use docker, containerd or direct", c.Backend)
	}
	if c.Socket == "" && c.Listen == "" {
		return bad("neither --socket nor --listen is set: the daemon would be unreachable")
	}
	if c.Socket != "" && !filepath.IsAbs(c.Socket) {
		return bad("--socket %q is not an absolute path", c.Socket)
	}
	if c.Task.AuditRequired && c.AuditLog == "" {
		return bad("--audit-required needs --audit-log: there is no audit log to require")
	}
	if c.AuditLog != "" && (c.Audit.MaxBytes < 0 || c.Audit.Keep < 1) {
		return bad("--audit-max-bytes must not be negative and --audit-keep must be at least 1 (got %d and %d)", c.Audit.MaxBytes, c.Audit.Keep)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") || (c.TLS.CAFile != "" && c.TLS.CertFile == "") {
		return bad("--tls-cert and --tls-key go together, and --tls-client-ca needs them")
	}
	// Every network listener needs the token (or a client certificate),
	// loopback ones too: any user of the host can reach loopback. Off
	// loopback, it needs TLS too, or the operator's word.
	for _, l := range []struct{ flag, addr string }{{"--listen", c.Listen}, {"--mcp-listen", c.MCPListen}} {
		if l.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(l.addr)
		if err != nil {
			return bad("%s %q: %v", l.flag, l.addr, err)
		}
		if c.TokenFile == "" && c.TLS.CAFile == "" && c.Tenants == "" {
			return bad("%s %q: every network listener requires --token-file (a file of mode 0600 holding the token callers must send; make run makes one), --tenants or --tls-client-ca", l.flag, l.addr)
		}
		if c.TLS.CertFile == "" && !c.InsecureListen && !isLoopback(host) {
			return bad("%s %q is not a loopback address: serve it over TLS (--tls-cert, --tls-key), or say --insecure-listen to send tokens and code in the clear", l.flag, l.addr)
		}
	}
	if c.InboundListen != "" {
		// Its tokens are in every request's Host: in the clear, they stay
		// on this host unless the operator says a proxy of theirs with
		// TLS is in front.
		host, _, err := net.SplitHostPort(c.InboundListen)
		if err != nil {
			return bad("--inbound-listen %q: %v", c.InboundListen, err)
		}
		if !c.InsecureListen && !isLoopback(host) {
			return bad("--inbound-listen %q is not a loopback address: put a TLS proxy in front, with --inbound-url naming it, and say --insecure-listen", c.InboundListen)
		}
	}
	for _, m := range c.TokenMounts {
		if _, ok := c.Task.Mounts[m]; !ok {
			return bad("--token-mount %q is not a mount given with --mount", m)
		}
	}
	if c.RequestMemory < c.Task.Bounds.MessageBytes() {
		return bad("--request-memory %d cannot hold one request of the largest size, %d bytes", c.RequestMemory, c.Task.Bounds.MessageBytes())
	}
	if c.RequestCalls < 1 || c.ReadTimeout <= 0 {
		return bad("--request-calls must be at least 1 and --read-timeout positive")
	}
	if c.MCPOutputBytes < 1024 || c.MCPWait < 0 {
		return bad("--mcp-output-bytes %d is below 1 KiB, or --mcp-wait %v is negative", c.MCPOutputBytes, c.MCPWait)
	}
	if !filepath.IsAbs(c.ArtifactsDir) {
		return bad("--artifacts-dir %q is not an absolute path", c.ArtifactsDir)
	}
	if c.Store.QuotaBytes < c.Store.MaxBundleBytes {
		return bad("--artifacts-quota %d cannot hold one bundle of --bundle-max-bytes %d", c.Store.QuotaBytes, c.Store.MaxBundleBytes)
	}
	if c.PeersService != "" && c.Task.Node == "" {
		return bad("--peers-service needs --node, the name its EndpointSlices give this daemon's pod")
	}
	if c.ShutdownTimeout <= 0 || c.DrainTimeout < 0 {
		return bad("--shutdown-timeout must be positive and --drain-timeout not negative")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("--log-level %q: use debug, info, warn or error", c.LogLevel)
	}
	if (c.EgressSecrets != "" || c.EgressCAFile != "") && !c.Task.Network.AllowsNetwork() {
		return bad("--egress-secrets and --egress-ca-file need network rules (--egress-allow or --egress-policy) for the hosts they are for")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("--log-format %q: use text or json", c.LogFormat)
	}
	return c.Task.Validate()
}

// defaultInitPath is sandboxd-init next to this binary, where make build
// puts it, or else where an install puts it.
func defaultInitPath() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sandboxd-init")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/local/lib/sandboxd/sandboxd-init"
}

// loadSecrets reads the secrets file at path, and the files of its
// values.
func loadSecrets(path string) ([]netpolicy.Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	list, err := netpolicy.ParseSecrets(b, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

// upstreamRoots are what the gateway verifies a host it adds a secret for
// with: the system's certificates and --egress-ca-file's.
func upstreamRoots(file string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if file == "" {
		return pool, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--egress-ca-file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// loadTenants reads the tenants file at path and checks it against the
// daemon.
func loadTenants(path string, svc *task.Service, withToken bool) ([]access.Tenant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tenants, err := access.ParseTenants(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, t := range tenants {
		if withToken && t.Name == tokenCallerName {
			return nil, fmt.Errorf("%s: tenant %q is the name of --token-file's caller", path, t.Name)
		}
	}
	if err := svc.CheckTenants(tenants); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tenants, nil
}

// readToken reads a bearer token file, refusing one others can read.
func readToken(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", fmt.Errorf("token file %s holds fewer than 16 characters", path)
	}
	return token, nil
}

// register binds every field of c to a flag of fs.
func (c *Config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Socket, "socket", c.Socket, "unix socket to serve gRPC on, to root and --socket-group (mode 0660); empty for none")
	fs.StringVar(&c.SocketGroup, "socket-group", c.SocketGroup, "group that may use the socket besides root ("+socketGroupNone+": root only)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "TCP address to serve gRPC on, e.g. 127.0.0.1:7070 (needs --token-file)")
	fs.StringVar(&c.TLS.CertFile, "tls-cert", c.TLS.CertFile, "PEM certificate (chain) of --listen and --mcp-listen: they serve TLS")
	fs.StringVar(&c.TLS.KeyFile, "tls-key", c.TLS.KeyFile, "PEM private key of --tls-cert")
	fs.StringVar(&c.TLS.CAFile, "tls-client-ca", c.TLS.CAFile, "PEM CA every client certificate must chain to: mutual TLS, callers named by their certificate's common name")
	fs.BoolVar(&c.InsecureListen, "insecure-listen", c.InsecureListen, "allow --listen and --mcp-listen off loopback without TLS")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file (mode 0600) holding the bearer token that callers of --listen and --mcp-listen must send")
	fs.StringVar(&c.Tenants, "tenants", c.Tenants, "JSON file of the tenants that may call --listen and --mcp-listen, by token SHA-256 or client certificate, with their quotas and grants (see docs/operations.md); SIGHUP reloads it")
	fs.Var((*stringsFlag)(&c.TokenMounts), "token-mount", "NAME of a --mount that callers with the token may ask for (repeatable; the socket's callers may ask for any)")
	fs.Var((*byteSize)(&c.RequestMemory), "request-memory", "what the requests in flight may hold together; beyond it calls are refused with RESOURCE_EXHAUSTED")
	fs.IntVar(&c.RequestCalls, "request-calls", c.RequestCalls, "calls that run tasks in flight at once; beyond, calls are refused with RESOURCE_EXHAUSTED")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", c.ReadTimeout, "how long a request may take to arrive")
	fs.StringVar(&c.Backend, "backend", c.Backend, "what runs the containers: direct (runc, crun or runsc run by the daemon itself, no engine), docker or containerd")
	fs.StringVar(&c.DockerHost, "docker-host", c.DockerHost, "dockerd's address (default: DOCKER_HOST or the default socket)")
	fs.StringVar(&c.ContainerdAddress, "containerd-address", c.ContainerdAddress, "containerd's socket (--backend containerd)")
	fs.StringVar(&c.ContainerdNamespace, "containerd-namespace", c.ContainerdNamespace, "containerd namespace of the images and tasks (--backend containerd)")
	fs.StringVar(&c.InitPath, "init-path", c.InitPath, "sandboxd's static init, bound into each container as PID 1")
	fs.StringVar(&c.RunscPath, "runsc-path", c.RunscPath, "gVisor's runsc (--backend containerd or direct; Docker has its own setting)")
	fs.StringVar(&c.ImageStore, "image-store", c.ImageStore, "the direct backend's image store (sandboxd image build unpacks into it)")
	fs.StringVar(&c.CgroupRoot, "cgroup-root", c.CgroupRoot, "cgroup file system root, to read peak memory from")
	fs.StringVar(&c.ImagesLock, "images-lock", c.ImagesLock, "image lock file written by sandboxd image build")
	fs.StringVar(&c.ImagesDir, "images-dir", c.ImagesDir, "folder of the operator's image recipes (DIR/NAME/recipe), besides the built-in ones; SIGHUP reloads it")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long SIGTERM lets running tasks end (new ones are refused, health is NOT_SERVING) before it cancels them; 0: at once")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long SIGTERM waits for running tasks to be cleaned up")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text (key=value) or json (an object a line)")
	fs.StringVar(&c.MCPListen, "mcp-listen", c.MCPListen, "TCP address to serve MCP on over Streamable HTTP, path /mcp, e.g. 127.0.0.1:7071 (needs --token-file)")
	fs.Var((*stringsFlag)(&c.MCPAllowedHosts), "mcp-allow-host", "a Host name the MCP endpoint accepts besides loopback names (repeatable)")
	fs.Var((*stringsFlag)(&c.MCPAllowedOrigins), "mcp-allow-origin", "a browser origin (scheme://host:port) that may call the MCP endpoint (repeatable)")
	fs.Var((*stringsFlag)(&c.ToolServers), "tool-server", "NAME=URL (Streamable HTTP) or NAME=COMMAND (stdio) of an MCP server whose tools programs may call as NAME.TOOL (repeatable; see docs/tools.md)")
	fs.Var((*stringsFlag)(&c.ToolTokens), "tool-server-token", "NAME=FILE: the bearer token --tool-server NAME is sent, from FILE (repeatable)")
	fs.Var((*byteSize)(&c.MCPOutputBytes), "mcp-output-bytes", "how much of each stream an MCP tool result carries")
	fs.DurationVar(&c.MCPWait, "mcp-wait", c.MCPWait, "how long an MCP tool call waits for its run before it answers RUNNING with the run's id, for wait_run (0: to the end)")
	fs.StringVar(&c.ArtifactsDir, "artifacts-dir", c.ArtifactsDir, "where every run's bundle is stored")
	fs.Var((*byteSize)(&c.Store.QuotaBytes), "artifacts-quota", "total size of stored bundles; past it the oldest go")
	fs.Var((*byteSize)(&c.Store.MaxBundleBytes), "bundle-max-bytes", "largest bundle (uncompressed); output files are left out to fit")
	fs.StringVar(&c.InboundListen, "inbound-listen", c.InboundListen, "TCP address of the inbound proxy, which serves the ports sessions open over HTTP and WebSocket, e.g. 127.0.0.1:8090 (docs/processes.md)")
	fs.StringVar(&c.Task.InboundURL, "inbound-url", c.Task.InboundURL, "the URL of an opened port, {token} standing for its token (default: http://{token}.localhost:PORT/ of --inbound-listen)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "TCP address to serve Prometheus metrics on, path /metrics, e.g. 127.0.0.1:9464 (no token: keep it on a private interface)")
	fs.BoolVar(&c.GRPCHistograms, "grpc-histograms", c.GRPCHistograms, "export grpc_server_handling_seconds, each gRPC method's latency histogram (false: the call counters only)")
	fs.StringVar(&c.AuditLog, "audit-log", c.AuditLog, "file of the tamper-evident audit log: a hash-chained JSON line per decision, run end and session event (sandboxd audit verify FILE checks it)")
	fs.Var((*byteSize)(&c.Audit.MaxBytes), "audit-max-bytes", "size past which the audit log is rotated to FILE.1, the chain going on in a new FILE")
	fs.IntVar(&c.Audit.Keep, "audit-keep", c.Audit.Keep, "rotated audit files kept (FILE.1 ... FILE.N)")
	fs.BoolVar(&c.Task.AuditRequired, "audit-required", c.Task.AuditRequired, "refuse runs and new sessions (UNAVAILABLE) once an audit record could not be written, until a restart: nothing runs off the record")

	t := &c.Task
	fs.StringVar(&t.Instance, "instance", t.Instance, "name of this daemon; at start it removes what an earlier instance of the same name left")
	fs.StringVar(&t.Node, "node", t.Node, "in a cluster, this daemon's name among its peers (its pod's name): the ids of its runs and sessions say it")
	fs.StringVar(&c.PeersService, "peers-service", c.PeersService, "in Kubernetes, the Service whose EndpointSlices list this daemon's peers (needs --node): calls for their runs and sessions are told where to go")
	fs.StringVar(&c.PeersPort, "peers-port", c.PeersPort, "the name of the gRPC port of --peers-service")
	fs.StringVar(&t.StateDir, "state-dir", t.StateDir, "folder for the tasks' folders")
	fs.StringVar(&t.DefaultRuntime, "default-runtime", t.DefaultRuntime, "OCI runtime of requests that name none: runc, crun or runsc (default: crun where the backend has it and --allow-runtime allows it, else the engine's)")
	fs.Var((*stringsFlag)(&t.AllowedRuntimes), "allow-runtime", "an OCI runtime requests may ask for (repeatable; default: every one the backend has)")
	fs.BoolVar(&t.RequireRunsc, "require-runsc", t.RequireRunsc, "run every task under gVisor: refuse requests for runc or crun, and refuse to start without runsc")
	fs.IntVar(&t.MaxRunning, "max-running", t.MaxRunning, "tasks that run at once")
	fs.IntVar(&t.MaxQueued, "max-queued", t.MaxQueued, "tasks that may wait for a slot; beyond, requests are refused with RESOURCE_EXHAUSTED")
	fs.Var((*byteSize)(&t.KillOutputBytes), "kill-output-bytes", "a stream that passes this (or its own cap, if larger) stops the task with OUTPUT_LIMIT")
	fs.Int64Var(&t.NoFile, "nofile", t.NoFile, "open-files limit (RLIMIT_NOFILE) of every task")
	fs.IntVar(&t.KeepFinished, "keep-finished", t.KeepFinished, "finished runs that GetRun remembers")
	fs.IntVar(&t.MaxSessions, "max-sessions", t.MaxSessions, "live sessions at once (0: sessions off)")
	fs.DurationVar(&t.SessionTTL, "session-ttl", t.SessionTTL, "the longest a session lives, and what one that asks for no TTL gets")
	fs.DurationVar(&t.SessionIdleTTL, "session-idle-ttl", t.SessionIdleTTL, "the longest a session stays without a call, and what one that asks for none gets")
	fs.IntVar(&t.SessionProcesses, "session-processes", t.SessionProcesses, "background processes a session keeps, running or ended (0: none may start)")
	fs.IntVar(&t.ProcessOutputBytes, "process-output-bytes", t.ProcessOutputBytes, "the last bytes kept of each stream of each background process")
	fs.BoolVar(&t.ProcessesKeepAlive, "processes-keep-alive", t.ProcessesKeepAlive, "a running background process keeps its session from its idle TTL")
	fs.IntVar(&t.PoolSize, "pool-size", t.PoolSize, "containers per image started ahead of time on the default runtime, each for one task (0: no pool)")
	fs.BoolVar(&t.Prestart, "prestart", t.Prestart, "pooled containers of images with Python start the interpreter ahead of the task, with the recipe's preimport modules imported (docs/prestart.md)")
	fs.Var((*stringsFlag)(&t.AllowedImages), "allow-image", "an image digest (sha256:...) that may run besides those of --images-lock (repeatable)")
	fs.DurationVar(&t.StallTimeout, "stall-timeout", t.StallTimeout, "how long a finished run waits for a caller that takes none of its output")
	fs.Var((*uidRangeFlag)(&t.UIDs), "uid-range", "FIRST:COUNT: the host uids given to sandboxes, one per container; none may be an account's or a subordinate id")
	fs.Var((*byteSize)(&t.Bounds.CodeBytes), "max-code-bytes", "largest program a request may carry")
	fs.IntVar(&t.Bounds.Files, "max-files", t.Bounds.Files, "most input files a request may carry")
	fs.Var((*byteSize)(&t.Bounds.FilesBytes), "max-files-bytes", "largest total size of a request's input files")
	fs.Var((*byteSize)(&t.Bounds.StdinBytes), "max-stdin-bytes", "largest stdin a request may carry")
	fs.IntVar(&t.Output.Files, "max-output-files", t.Output.Files, "most output files a bundle keeps the content of")
	fs.Var((*byteSize)(&t.Output.Bytes), "max-output-bytes", "most bytes of output files a bundle keeps")
	fs.Var(mountFlag(t), "mount", "NAME=/host/folder a request may mount read-only at /mnt/NAME (repeatable)")

	n := &t.Network
	fs.Var((*rulesFlag)(&n.Permitted), "egress-allow", "a rule, HOST[:PORTS] or CIDR[:PORTS] (\"pypi.internal:443\", \"*.example.org\", \"10.1.0.0/16:5432\"; ports default to 80,443), that allow-listed requests' own rules must fall within (repeatable)")
	fs.Var((*policiesFlag)(&n.Policies), "egress-policy", "NAME=RULE;RULE...: a named policy requests may choose (repeatable)")
	fs.Var((*hostsFlag)(&n.Hosts), "egress-host", "NAME=ADDRESS: a name the egress gateway resolves itself, to an address the operator vouches for (repeatable; a private address is reachable only this way or by a CIDR rule)")
	fs.Var((*prefixFlag)(&c.EgressSubnet), "egress-subnet", "IPv4 range of the egress gateway and the allow-listed containers")
	fs.StringVar(&c.EgressRunDir, "egress-run-dir", c.EgressRunDir, "folder of the egress gateway's network namespace and resolv.conf")
	fs.StringVar(&c.EgressSecrets, "egress-secrets", c.EgressSecrets, "JSON file of the secrets the egress gateway adds to allow-listed runs' HTTPS requests, each for the hosts it names; programs hold a placeholder only (docs/networking.md); SIGHUP reloads it")
	fs.StringVar(&c.EgressCAFile, "egress-ca-file", c.EgressCAFile, "PEM certificates the egress gateway trusts, besides the system's, when it verifies a host it adds a secret for")
	fs.StringVar(&c.ClaimsDir, "claims-dir", c.ClaimsDir, "host-wide folder where daemons claim their instance, uid range and egress subnet; the same for every daemon of the host")
	fs.IntVar(&t.EgressPoolSize, "egress-pool-size", t.EgressPoolSize, "containers per image kept started ahead of time for allow-listed tasks")
	fs.Var((*byteSize)(&n.DefaultCaps.BytesOut), "egress-bytes-out", "bytes an allow-listed task may send, when it asks for no cap")
	fs.Var((*byteSize)(&n.DefaultCaps.BytesIn), "egress-bytes-in", "bytes an allow-listed task may receive, when it asks for no cap")
	fs.IntVar(&n.DefaultCaps.Connections, "egress-connections", n.DefaultCaps.Connections, "connections an allow-listed task may open, when it asks for no cap")
	fs.Var((*byteSize)(&n.MaxCaps.BytesOut), "egress-max-bytes-out", "most bytes an allow-listed task may ask to send")
	fs.Var((*byteSize)(&n.MaxCaps.BytesIn), "egress-max-bytes-in", "most bytes an allow-listed task may ask to receive")
	fs.IntVar(&n.MaxCaps.Connections, "egress-max-connections", n.MaxCaps.Connections, "most connections an allow-listed task may ask for")

	l := &t.Limits
	fs.Var((*byteSize)(&l.Default.MemoryBytes), "default-memory", "memory of a task that asks for none")
	fs.Var((*byteSize)(&l.Max.MemoryBytes), "max-memory", "most memory a task may ask for")
	fs.Int64Var(&l.Default.CPUMillis, "default-cpu-millis", l.Default.CPUMillis, "CPU of a task that asks for none (1000 = one core)")
	fs.Int64Var(&l.Max.CPUMillis, "max-cpu-millis", l.Max.CPUMillis, "most CPU a task may ask for")
	fs.Int64Var(&l.Default.Pids, "default-pids", l.Default.Pids, "processes and threads of a task that asks for none")
	fs.Int64Var(&l.Max.Pids, "max-pids", l.Max.Pids, "most processes and threads a task may ask for")
	fs.DurationVar(&l.Default.Timeout, "default-timeout", l.Default.Timeout, "wall-clock limit of a task that asks for none")
	fs.DurationVar(&l.Max.Timeout, "max-timeout", l.Max.Timeout, "longest wall-clock limit a task may ask for")
	fs.Var((*byteSize)(&l.Default.StdoutBytes), "default-stdout-bytes", "stdout delivered to callers that ask for no cap")
	fs.Var((*byteSize)(&l.Max.StdoutBytes), "max-stdout-bytes", "largest stdout cap a task may ask for")
	fs.Var((*byteSize)(&l.Default.StderrBytes), "default-stderr-bytes", "stderr delivered to callers that ask for no cap")
	fs.Var((*byteSize)(&l.Max.StderrBytes), "max-stderr-bytes", "largest stderr cap a task may ask for")
	fs.Var((*byteSize)(&l.Default.DiskBytes), "default-disk", "size of /workspace (and /tmp) of a task that asks for none")
	fs.Var((*byteSize)(&l.Max.DiskBytes), "max-disk", "largest /workspace a task may ask for")
}

// isLoopback says whether a listener's host is loopback only: a loopback
// address or "localhost". An empty host listens everywhere.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
