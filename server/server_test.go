package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
)

// start serves the real engine on a fake runtime over an in-memory
// connection and returns a client.
func start(t *testing.T, prog fake.Program, opts Options, mutate func(*task.Config), engine ...task.Option) pb.SandboxServiceClient {
	t.Helper()
	conn := startConn(t, prog, opts, mutate, engine...)
	return pb.NewSandboxServiceClient(conn)
}

// newEngine starts an engine on the fake runtime running prog (see
// servertest.NewEngine).
func newEngine(t *testing.T, prog fake.Program, mutate func(*task.Config), opts ...task.Option) *task.Service {
	t.Helper()
	return servertest.NewEngine(t, prog, mutate, opts...)
}

// startConn serves the engine on prog over an in-memory listener.
func startConn(t *testing.T, prog fake.Program, opts Options, mutate func(*task.Config), engine ...task.Option) *grpc.ClientConn {
	t.Helper()
	return servertest.Serve(t, NewGRPCServer(New(newEngine(t, prog, mutate, engine...)), NewHealth(), opts))
}

func hello(_ context.Context, spec runtime.Spec) runtime.Exit {
	io.WriteString(spec.Stdout, "out\xff\xfe")
	io.WriteString(spec.Stderr, "err")
	return runtime.Exit{Code: 0, PeakMemoryBytes: 1 << 20}
}

func collect(t *testing.T, stream grpc.ServerStreamingClient[pb.RunEvent]) []*pb.RunEvent {
	t.Helper()
	var evs []*pb.RunEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

func TestRunCodeStream(t *testing.T) {
	c := start(t, hello, Options{}, nil)
	stream, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "print(1)",
		Options: &pb.RunOptions{Limits: &pb.Limits{MemoryBytes: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, stream)
	if len(evs) != 4 {
		t.Fatalf("got %d events, want started, stdout, stderr, result: %v", len(evs), evs)
	}
	st := evs[0].GetStarted()
	if st == nil || st.GetRunId() == "" || st.GetLimits().GetMemoryBytes() != 64<<20 || st.GetLimits().GetTimeoutMs() != 30000 {
		t.Errorf("first event = %v, want started with the effective limits", evs[0])
	}
	if got := string(evs[1].GetStdout()); got != "out\xff\xfe" {
		t.Errorf("stdout = %q, want the bytes as written", got)
	}
	if got := string(evs[2].GetStderr()); got != "err" {
		t.Errorf("stderr = %q", got)
	}
	res := evs[3].GetResult()
	if res.GetStatus() != pb.Status_OK || res.GetRunId() != st.GetRunId() || res.GetStdoutTotal() != 5 || res.GetPeakMemoryBytes() != 1<<20 {
		t.Errorf("result = %v", res)
	}

	got, err := c.GetRun(context.Background(), &pb.GetRunRequest{RunId: st.GetRunId()})
	if err != nil || got.GetState() != pb.RunState_RUN_STATE_FINISHED || got.GetResult().GetStatus() != pb.Status_OK {
		t.Errorf("GetRun() = %v, %v", got, err)
	}
}

func TestRunCommandStatuses(t *testing.T) {
	c := start(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		switch spec.Argv[len(spec.Argv)-1] {
		case "segv":
			return runtime.Exit{Code: 139}
		case "oom":
			return runtime.Exit{Code: 137, OOMKilled: true}
		}
		return runtime.Exit{Code: 2}
	}, Options{}, nil)
	tests := []struct {
		shell  string
		status pb.Status
	}{
		{"segv", pb.Status_KILLED_BY_SIGNAL},
		{"oom", pb.Status_OOM_KILLED},
		{"false", pb.Status_NONZERO_EXIT},
	}
	for _, tt := range tests {
		t.Run(tt.shell, func(t *testing.T) {
			stream, err := c.RunCommand(context.Background(), &pb.RunCommandRequest{Shell: tt.shell})
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(t, stream)
			if res := evs[len(evs)-1].GetResult(); res.GetStatus() != tt.status {
				t.Errorf("status = %v, want %v (a user-code failure is a result, not an RPC error)", res.GetStatus(), tt.status)
			}
		})
	}
}

func TestInvalidArgumentNamesTheField(t *testing.T) {
	c := start(t, hello, Options{MaxRecvBytes: 64 << 20}, nil)
	tests := []struct {
		name  string
		req   *pb.RunCodeRequest
		field string
	}{
		{"unknown language", &pb.RunCodeRequest{Language: "cobol", Code: "x"}, "language:"},
		{"traversal", &pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Files: []*pb.File{{Path: "../x"}}}}, "files[0].path:"},
		{"oversize code", &pb.RunCodeRequest{Language: "python", Code: strings.Repeat("#", 2<<20)}, "code:"},
		{"workdir outside", &pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Workdir: "/etc"}}, "workdir:"},
		{"absurd limit", &pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Limits: &pb.Limits{Pids: -5}}}, "limits.pids:"},
		{"port out of range", &pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Network: &pb.Network{
			Mode: pb.NetworkMode_NETWORK_MODE_ALLOWLIST, Rules: []*pb.NetworkRule{{Host: "a.test"}, {Host: "b.test", Ports: []uint32{70000}}}}}}, "network.rules[1]:"},
		{"unknown mode", &pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Network: &pb.Network{Mode: 7}}}, "network.mode:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := c.RunCode(context.Background(), tt.req)
			if err == nil {
				_, err = stream.Recv()
			}
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field) {
				t.Fatalf("error = %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), tt.field)
			}
		})
	}
}

func TestBusyIsResourceExhaustedWithRetryInfoAndQuotaFailure(t *testing.T) {
	block := make(chan struct{})
	c := start(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return runtime.Exit{}
	}, Options{}, func(cfg *task.Config) { cfg.MaxRunning = 1; cfg.MaxQueued = 0 })
	defer close(block)
	first, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := first.Recv(); err != nil || ev.GetStarted() == nil {
		t.Fatalf("first run did not start: %v %v", ev, err)
	}
	second, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err == nil {
		_, err = second.Recv()
	}
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("second run = %v, want RESOURCE_EXHAUSTED", err)
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Fatalf("details = %v, want a RetryInfo with a delay", st.Details())
	}
	if quota == nil || len(quota.GetViolations()) != 1 || !strings.HasPrefix(quota.GetViolations()[0].GetDescription(), "max-queued: ") {
		t.Fatalf("details = %v, want a QuotaFailure naming max-queued", st.Details())
	}
}

func TestCancelRun(t *testing.T) {
	c := start(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	}, Options{}, nil)
	stream, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := ev.GetStarted().GetRunId()
	resp, err := c.CancelRun(context.Background(), &pb.CancelRunRequest{RunId: id})
	if err != nil || resp.GetState() != pb.RunState_RUN_STATE_RUNNING {
		t.Fatalf("CancelRun() = %v, %v", resp, err)
	}
	evs := collect(t, stream)
	if res := evs[len(evs)-1].GetResult(); res.GetStatus() != pb.Status_CANCELLED {
		t.Fatalf("result = %v, want CANCELLED", res)
	}
	if _, err := c.CancelRun(context.Background(), &pb.CancelRunRequest{RunId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("CancelRun(unknown) = %v, want NOT_FOUND", err)
	}
	if _, err := c.GetRun(context.Background(), &pb.GetRunRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetRun(empty) = %v, want INVALID_ARGUMENT", err)
	}
}

func TestListImages(t *testing.T) {
	c := start(t, hello, Options{}, func(cfg *task.Config) { cfg.Mounts = map[string]string{"data": "/srv/data"} })
	inv, err := c.ListImages(context.Background(), &pb.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GetLanguages()) != len(images.Default().Languages) || inv.GetLanguages()[0].GetName() != "python" {
		t.Errorf("languages = %v", inv.GetLanguages())
	}
	if len(inv.GetImages()) != len(images.Default().Images) || !inv.GetImages()[0].GetPresent() || inv.GetImages()[0].GetDigest() != "sha256:python" {
		t.Errorf("images = %v", inv.GetImages())
	}
	if len(inv.GetRuntimes()) != 1 || !inv.GetRuntimes()[0].GetIsDefault() {
		t.Errorf("runtimes = %v", inv.GetRuntimes())
	}
	if inv.GetMaxLimits().GetMemoryBytes() != 4<<30 || inv.GetDefaultLimits().GetPids() != 128 {
		t.Errorf("limits = %v / %v", inv.GetDefaultLimits(), inv.GetMaxLimits())
	}
	if len(inv.GetMounts()) != 1 || inv.GetMounts()[0] != "data" {
		t.Errorf("mounts = %v, want the names only", inv.GetMounts())
	}
}

func TestGetBundle(t *testing.T) {
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, hello, Options{}, nil, task.WithArtifacts(store))
	stream, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "print(1)", Options: &pb.RunOptions{Seed: proto.Uint64(3)}})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, stream)
	res := evs[len(evs)-1].GetResult()
	if res.GetBundleDigest() == "" || res.GetReproducibleDigest() == "" {
		t.Fatalf("result = %v, want a bundle", res)
	}
	chunks, err := c.GetBundle(context.Background(), &pb.GetBundleRequest{Digest: res.GetBundleDigest()})
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	for {
		ch, err := chunks.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, ch.GetData()...)
	}
	b, err := artifacts.Verify(bytes.NewReader(data), res.GetBundleDigest(), artifacts.DefaultReadLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Reproducible.Request.Seed != "3" {
		t.Errorf("seed = %q, want 3", b.Manifest.Reproducible.Request.Seed)
	}
	for _, tt := range []struct {
		digest string
		code   codes.Code
	}{{"sha256:" + strings.Repeat("0", 64), codes.NotFound}, {"../../etc/passwd", codes.InvalidArgument}} {
		s, err := c.GetBundle(context.Background(), &pb.GetBundleRequest{Digest: tt.digest})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != tt.code {
			t.Errorf("GetBundle(%q) = %v, want %v", tt.digest, err, tt.code)
		}
	}
}

func TestTokenAuth(t *testing.T) {
	conn := startConn(t, hello, Options{Identities: access.NewIdentities("0123456789abcdef", access.Caller{Name: "token"}, false)}, nil)
	c := pb.NewSandboxServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ListImages(ctx, &pb.ListImagesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want UNAUTHENTICATED", err)
	}
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong")
	if _, err := c.ListImages(bad, &pb.ListImagesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v, want UNAUTHENTICATED", err)
	}
	stream, err := c.RunCode(bad, &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token on a stream: %v, want UNAUTHENTICATED", err)
	}
	good := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer 0123456789abcdef")
	if _, err := c.ListImages(good, &pb.ListImagesRequest{}); err != nil {
		t.Fatalf("right token: %v", err)
	}
	// Health checks need no token, so that probes work.
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: pb.SandboxService_ServiceDesc.ServiceName})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
}

func TestReflectionListsTheService(t *testing.T) {
	conn := startConn(t, hello, Options{}, nil)
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"sandboxd.v1.SandboxService", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
}

// eventSink is a server stream that keeps what is sent.
type eventSink struct {
	ctx    context.Context
	events []*pb.RunEvent
}

var _ grpc.ServerStreamingServer[pb.RunEvent] = (*eventSink)(nil)

func (s *eventSink) Send(ev *pb.RunEvent) error   { s.events = append(s.events, ev); return nil }
func (s *eventSink) Context() context.Context     { return s.ctx }
func (s *eventSink) SetHeader(metadata.MD) error  { return nil }
func (s *eventSink) SendHeader(metadata.MD) error { return nil }
func (s *eventSink) SetTrailer(metadata.MD)       {}
func (s *eventSink) SendMsg(m any) error          { return s.Send(m.(*pb.RunEvent)) }
func (s *eventSink) RecvMsg(any) error            { return nil }
