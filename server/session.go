package server

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/session"
)

// CreateSession starts a session.
func (s *Server) CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.SessionInfo, error) {
	opts, err := wire.OptionsFromProto(req.GetOptions())
	if err != nil {
		return nil, ToStatus(err)
	}
	info, err := s.svc.CreateSession(ctx, session.Request{
		Language: req.GetLanguage(), Options: opts, TTL: req.GetTtl().AsDuration(), IdleTTL: req.GetIdleTtl().AsDuration(),
	})
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// GetSession reports a session.
func (s *Server) GetSession(ctx context.Context, req *pb.GetSessionRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	info, err := s.svc.GetSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// ListSessions reports the caller's live sessions.
func (s *Server) ListSessions(ctx context.Context, _ *pb.ListSessionsRequest) (*pb.ListSessionsResponse, error) {
	out := &pb.ListSessionsResponse{}
	for _, info := range s.svc.ListSessions(ctx) {
		out.Sessions = append(out.Sessions, wire.SessionToProto(info))
	}
	return out, nil
}

// DeleteSession ends a session.
func (s *Server) DeleteSession(ctx context.Context, req *pb.DeleteSessionRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	info, err := s.svc.DeleteSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// PauseSession saves a session to disk and removes its container.
func (s *Server) PauseSession(ctx context.Context, req *pb.PauseSessionRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	info, err := s.svc.PauseSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// ResumeSession restores a paused session into a new container.
func (s *Server) ResumeSession(ctx context.Context, req *pb.ResumeSessionRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	info, err := s.svc.ResumeSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// UpdateSessionNetwork changes a live session's network policy.
func (s *Server) UpdateSessionNetwork(ctx context.Context, req *pb.UpdateSessionNetworkRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	if req.GetNetwork() == nil {
		return nil, status.Error(codes.InvalidArgument, "network: is missing")
	}
	n, err := wire.NetworkFromProto(req.GetNetwork())
	if err != nil {
		return nil, ToStatus(err)
	}
	info, err := s.svc.UpdateSessionNetwork(ctx, req.GetSessionId(), n)
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.SessionToProto(info), nil
}

// ForkSession replays a session's chain up to a bundle in a new session,
// and keeps that session.
func (s *Server) ForkSession(ctx context.Context, req *pb.ForkSessionRequest) (*pb.ForkSessionResponse, error) {
	if req.GetFromBundle() == "" {
		return nil, status.Error(codes.InvalidArgument, "from_bundle: is empty")
	}
	rep, err := forkSession(ctx, s.svc, req.GetFromBundle(), s.svc.Config().DefaultRuntime)
	if err != nil {
		return nil, ToStatus(err)
	}
	info, err := s.svc.GetSession(ctx, rep.Session)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ForkSessionResponse{Session: wire.SessionToProto(info), Reproduced: rep.Reproduced, FirstDiffering: rep.FirstDiffering, Warnings: rep.Warnings}, nil
}

// forkSession loads the chain that ends at digest from e's store and
// replays it in a new session that it keeps. The replay asks for what the
// chain recorded, which the engine grants or refuses as for any caller.
func forkSession(ctx context.Context, e reproducer.SessionEngine, digest, defaultRuntime string) (*reproducer.ChainReport, error) {
	rc, err := e.OpenBundle(ctx, digest)
	if err != nil {
		return nil, err
	}
	last, err := reproducer.Load(rc, digest, artifacts.DefaultReadLimits())
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("from_bundle: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	chain, err := reproducer.LoadChain(ctx, last, e)
	if err != nil {
		return nil, fmt.Errorf("from_bundle: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	m := last.Manifest().Reproducible.Request
	rep, err := reproducer.ReplayChain(ctx, chain, e, reproducer.Options{AllowMounts: m.Mounts, AllowRuntimes: []string{last.Manifest().Reproducible.Runtime.Name}, DefaultRuntime: defaultRuntime}, true)
	if err != nil && rep != nil && rep.Session != "" {
		_, _ = e.DeleteSession(context.WithoutCancel(ctx), rep.Session)
	}
	return rep, err
}
