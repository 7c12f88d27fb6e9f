// Package server is the gRPC face of sandboxd: the sandboxd.v1 service over
// the task engine. It converts requests and events (package wire), maps
// engine errors to gRPC status codes once (ToStatus), checks bearer tokens
// and client certificates, and serves the standard health service and
// reflection. Its Go client is package client.
package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// Server implements sandboxd.v1.SandboxService on a task.Service.
type Server struct {
	pb.UnimplementedSandboxServiceServer
	svc *task.Service
}

// New returns a Server over svc.
func New(svc *task.Service) *Server {
	return &Server{svc: svc}
}

// NewGRPCServer returns a gRPC server with the sandbox service, the health
// service (reporting hs) and reflection registered.
func NewGRPCServer(s *Server, hs *health.Server, opts Options) *grpc.Server {
	sopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary(opts.Log)),
		grpc.ChainStreamInterceptor(recoverStream(opts.Log)),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
	}
	if opts.Metrics != nil {
		// Next to the recovery: refusals at the door count too.
		sopts = append(sopts, grpc.ChainUnaryInterceptor(opts.Metrics.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(opts.Metrics.StreamServerInterceptor()))
	}
	if opts.MaxRecvBytes > 0 {
		sopts = append(sopts, grpc.MaxRecvMsgSize(opts.MaxRecvBytes))
	}
	if opts.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	id := identify{fixed: opts.Caller, ids: opts.Identities, audit: opts.Audit, log: opts.Log}
	sopts = append(sopts, grpc.ChainUnaryInterceptor(id.unary), grpc.ChainStreamInterceptor(id.stream))
	if opts.Budget != nil {
		l := limit{budget: opts.Budget, maxRecv: int64(opts.MaxRecvBytes), readTimeout: opts.ReadTimeout}
		sopts = append(sopts, grpc.ChainStreamInterceptor(l.stream))
	}
	g := grpc.NewServer(sopts...)
	pb.RegisterSandboxServiceServer(g, s)
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	if opts.Metrics != nil {
		opts.Metrics.InitializeMetrics(g)
	}
	return g
}

// NewHealth returns a health server that reports the sandbox service as
// serving; set it to NOT_SERVING when shutting down.
func NewHealth() *health.Server {
	hs := health.NewServer()
	hs.SetServingStatus(pb.SandboxService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return hs
}

// RunCode runs a program in a language.
func (s *Server) RunCode(req *pb.RunCodeRequest, stream grpc.ServerStreamingServer[pb.RunEvent]) error {
	opts, err := wire.OptionsFromProto(req.GetOptions())
	if err != nil {
		return ToStatus(err)
	}
	return s.run(stream, run.Request{Program: &run.Program{Language: req.GetLanguage(), Code: req.GetCode()}, Options: opts}, req.GetOptions().GetDetach())
}

// RunCommand runs an argv or a shell line.
func (s *Server) RunCommand(req *pb.RunCommandRequest, stream grpc.ServerStreamingServer[pb.RunEvent]) error {
	opts, err := wire.OptionsFromProto(req.GetOptions())
	if err != nil {
		return ToStatus(err)
	}
	return s.run(stream, run.Request{Command: &run.Command{Argv: req.GetArgv(), Shell: req.GetShell()}, Options: opts}, req.GetOptions().GetDetach())
}

// run runs req, streaming its events and result; detached, the stream
// ends once the run has started.
func (s *Server) run(stream grpc.ServerStreamingServer[pb.RunEvent], req run.Request, detach bool) error {
	ctx := stream.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(wire.FollowedHeader)) > 0 {
		ctx = task.SentHere(ctx)
	}
	if detach {
		d, err := s.svc.Detach(ctx, req)
		if err != nil {
			return ToStatus(err)
		}
		if d.Ended != nil {
			// Ended without starting here (LOST): its result, as AttachRun
			// would give it.
			return s.endStream(stream.Send, *d.Ended, nil)
		}
		return sendWithin(stream.Send, &pb.RunEvent{Event: &pb.RunEvent_Started{Started: wire.StartedToProto(d.Started)}}, s.svc.Config().StallTimeout)
	}
	res, err := s.svc.Run(ctx, req, streamObserver{stream.Send})
	return s.endStream(stream.Send, res, err)
}

// endStream ends a run's stream with its result, or the error.
func (s *Server) endStream(send func(*pb.RunEvent) error, res run.Result, err error) error {
	if err != nil {
		return ToStatus(err)
	}
	return sendWithin(send, &pb.RunEvent{Event: &pb.RunEvent_Result{Result: wire.ResultToProto(res)}}, s.svc.Config().StallTimeout)
}

// AttachRun follows a run from offsets.
func (s *Server) AttachRun(req *pb.AttachRunRequest, stream grpc.ServerStreamingServer[pb.RunEvent]) error {
	if req.GetRunId() == "" {
		return status.Error(codes.InvalidArgument, "run_id: is empty")
	}
	res, err := s.svc.Attach(stream.Context(), req.GetRunId(), req.GetStdoutOffset(), req.GetStderrOffset(), streamObserver{stream.Send})
	return s.endStream(stream.Send, res, err)
}

// WaitRun waits for a run's end.
func (s *Server) WaitRun(ctx context.Context, req *pb.WaitRunRequest) (*pb.GetRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, status.Error(codes.InvalidArgument, "run_id: is empty")
	}
	r, err := s.svc.Wait(ctx, req.GetRunId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.RunToProto(r), nil
}

// ListRuns reports the caller's runs.
func (s *Server) ListRuns(ctx context.Context, _ *pb.ListRunsRequest) (*pb.ListRunsResponse, error) {
	out := &pb.ListRunsResponse{}
	for _, r := range s.svc.ListRuns(ctx) {
		info := wire.RunToProto(r)
		info.Network = nil // GetRun has each run's log
		out.Runs = append(out.Runs, info)
	}
	return out, nil
}

// sendWithin sends ev, or gives up after timeout: a caller that stopped
// reading is dropped, and the result stays with GetRun. Nothing else sends
// on the stream by then: Run returns once its events are sent.
func sendWithin(send func(*pb.RunEvent) error, ev *pb.RunEvent, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- send(ev) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the caller took nothing for %v: the stream is dropped; GetRun has the result", timeout)
	}
}

// streamObserver sends a run's events on its gRPC stream.
type streamObserver struct {
	send func(*pb.RunEvent) error
}

func (o streamObserver) Started(st run.Started) error {
	return o.send(&pb.RunEvent{Event: &pb.RunEvent_Started{Started: wire.StartedToProto(st)}})
}

func (o streamObserver) Output(s run.Stream, p []byte) error {
	// Send marshals before it returns, so p need not be copied.
	if s == run.Stderr {
		return o.send(&pb.RunEvent{Event: &pb.RunEvent_Stderr{Stderr: p}})
	}
	return o.send(&pb.RunEvent{Event: &pb.RunEvent_Stdout{Stdout: p}})
}

func (o streamObserver) Network(ev run.NetworkEvent) error {
	return o.send(&pb.RunEvent{Event: &pb.RunEvent_Network{Network: wire.NetworkEventToProto(ev)}})
}

// GetRun reports a run.
func (s *Server) GetRun(ctx context.Context, req *pb.GetRunRequest) (*pb.GetRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, status.Error(codes.InvalidArgument, "run_id: is empty")
	}
	r, err := s.svc.Get(ctx, req.GetRunId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.RunToProto(r), nil
}

// CancelRun cancels a run.
func (s *Server) CancelRun(ctx context.Context, req *pb.CancelRunRequest) (*pb.CancelRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, status.Error(codes.InvalidArgument, "run_id: is empty")
	}
	st, err := s.svc.Cancel(ctx, req.GetRunId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.CancelRunResponse{State: wire.RunStateToProto(st)}, nil
}

// ListImages reports languages, images, runtimes and limits.
func (s *Server) ListImages(ctx context.Context, _ *pb.ListImagesRequest) (*pb.ListImagesResponse, error) {
	inv, err := s.svc.Inventory(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.InventoryToProto(inv), nil
}

// GetBundle streams a stored bundle.
func (s *Server) GetBundle(req *pb.GetBundleRequest, stream grpc.ServerStreamingServer[pb.BundleChunk]) error {
	open := s.svc.OpenBundle
	if req.GetAttestation() {
		open = s.svc.OpenAttestation
	}
	f, err := open(stream.Context(), req.GetDigest())
	if err != nil {
		return ToStatus(err)
	}
	defer f.Close()
	return sendChunks(f, func(b []byte) error { return stream.Send(&pb.BundleChunk{Data: b}) }, "bundle")
}
