package server

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// CreateSession starts a session.
func (s *Server) CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.SessionInfo, error) {
	opts, err := optionsFromProto(req.GetOptions())
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := s.svc.CreateSession(ctx, session.Request{
		Language: req.GetLanguage(), Options: opts, TTL: req.GetTtl().AsDuration(), IdleTTL: req.GetIdleTtl().AsDuration(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return sessionToProto(info), nil
}

// GetSession reports a session.
func (s *Server) GetSession(ctx context.Context, req *pb.GetSessionRequest) (*pb.SessionInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	info, err := s.svc.GetSession(ctx, req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return sessionToProto(info), nil
}

// ListSessions reports the caller's live sessions.
func (s *Server) ListSessions(ctx context.Context, _ *pb.ListSessionsRequest) (*pb.ListSessionsResponse, error) {
	out := &pb.ListSessionsResponse{}
	for _, info := range s.svc.ListSessions(ctx) {
		out.Sessions = append(out.Sessions, sessionToProto(info))
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
		return nil, toStatus(err)
	}
	return sessionToProto(info), nil
}

var sessionStateToProto = map[session.State]pb.SessionState{
	session.Active:  pb.SessionState_SESSION_STATE_ACTIVE,
	session.Deleted: pb.SessionState_SESSION_STATE_DELETED,
	session.Expired: pb.SessionState_SESSION_STATE_EXPIRED,
	session.Failed:  pb.SessionState_SESSION_STATE_FAILED,
	session.Lost:    pb.SessionState_SESSION_STATE_LOST,
}

var sessionStateFromProto = inverse(sessionStateToProto)

func sessionToProto(i session.Info) *pb.SessionInfo {
	return &pb.SessionInfo{
		SessionId: i.ID, State: sessionStateToProto[i.State], Reason: i.Reason, Language: i.Language,
		Image: i.Image, ImageDigest: i.ImageDigest, Runtime: i.Runtime, Limits: limitsToProto(i.Limits), Labels: i.Labels,
		CreatedAt: timestamppb.New(i.CreatedAt), LastUsedAt: timestamppb.New(i.LastUsedAt),
		ExpiresAt: timestamppb.New(i.ExpiresAt), IdleExpiresAt: timestamppb.New(i.IdleExpiresAt),
		Calls: i.Calls, LastBundle: i.LastBundle, Start: string(i.Start), Tenant: i.Tenant,
	}
}

func sessionFromProto(i *pb.SessionInfo) session.Info {
	return session.Info{
		ID: i.GetSessionId(), State: sessionStateFromProto[i.GetState()], Reason: i.GetReason(), Language: i.GetLanguage(),
		Image: i.GetImage(), ImageDigest: i.GetImageDigest(), Runtime: i.GetRuntime(), Limits: answeredLimits(i.GetLimits()),
		Labels: i.GetLabels(), CreatedAt: i.GetCreatedAt().AsTime(), LastUsedAt: i.GetLastUsedAt().AsTime(),
		ExpiresAt: i.GetExpiresAt().AsTime(), IdleExpiresAt: i.GetIdleExpiresAt().AsTime(),
		Calls: i.GetCalls(), LastBundle: i.GetLastBundle(), Start: run.StartPath(i.GetStart()), Tenant: i.GetTenant(),
	}
}

func sessionCallToProto(c *artifacts.Session) *pb.SessionCall {
	if c == nil {
		return nil
	}
	return &pb.SessionCall{SessionId: c.ID, Seq: c.Seq, ParentBundle: c.ParentBundle, WorkspaceBefore: c.WorkspaceBefore, WorkspaceAfter: c.WorkspaceAfter}
}

func sessionCallFromProto(c *pb.SessionCall) *artifacts.Session {
	if c == nil {
		return nil
	}
	return &artifacts.Session{ID: c.GetSessionId(), Seq: c.GetSeq(), ParentBundle: c.GetParentBundle(), WorkspaceBefore: c.GetWorkspaceBefore(), WorkspaceAfter: c.GetWorkspaceAfter()}
}

func kernelToProto(k *artifacts.KernelReply) *pb.KernelReply {
	if k == nil {
		return nil
	}
	out := &pb.KernelReply{ExecutionCount: k.ExecutionCount, Result: k.Result}
	for _, d := range k.Displays {
		m := &pb.MimeBundle{Data: d.Data}
		for _, f := range d.Files {
			m.Files = append(m.Files, &pb.DisplayFile{Mime: f.MIME, Path: f.Path, Sha256: f.SHA256, Size: f.Size})
		}
		out.Displays = append(out.Displays, m)
	}
	if e := k.Error; e != nil {
		out.Error = &pb.KernelError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	return out
}

func kernelFromProto(k *pb.KernelReply) *artifacts.KernelReply {
	if k == nil {
		return nil
	}
	out := &artifacts.KernelReply{ExecutionCount: k.GetExecutionCount(), Result: k.GetResult()}
	for _, d := range k.GetDisplays() {
		disp := artifacts.Display{Data: d.GetData()}
		for _, f := range d.GetFiles() {
			disp.Files = append(disp.Files, artifacts.DisplayFile{MIME: f.GetMime(), Path: f.GetPath(), SHA256: f.GetSha256(), Size: f.GetSize()})
		}
		out.Displays = append(out.Displays, disp)
	}
	if e := k.GetError(); e != nil {
		out.Error = &artifacts.KernelError{Name: e.GetName(), Value: e.GetValue(), Traceback: e.GetTraceback()}
	}
	return out
}

// CreateSession starts a session.
func (c *Client) CreateSession(ctx context.Context, req session.Request) (session.Info, error) {
	info, err := c.c.CreateSession(ctx, &pb.CreateSessionRequest{
		Language: req.Language, Options: optionsToProto(req.Options), Ttl: durationpb.New(req.TTL), IdleTtl: durationpb.New(req.IdleTTL),
	})
	if err != nil {
		return session.Info{}, fromStatus(err)
	}
	return sessionFromProto(info), nil
}

// GetSession reports a session.
func (c *Client) GetSession(ctx context.Context, id string) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.GetSession(ctx, &pb.GetSessionRequest{SessionId: id})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return sessionFromProto(info), nil
	})
}

// ListSessions reports the live sessions.
func (c *Client) ListSessions(ctx context.Context) ([]session.Info, error) {
	resp, err := c.c.ListSessions(ctx, &pb.ListSessionsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]session.Info, 0, len(resp.GetSessions()))
	for _, i := range resp.GetSessions() {
		out = append(out, sessionFromProto(i))
	}
	return out, nil
}

// DeleteSession ends a session.
func (c *Client) DeleteSession(ctx context.Context, id string) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.DeleteSession(ctx, &pb.DeleteSessionRequest{SessionId: id})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return sessionFromProto(info), nil
	})
}

// ForkSession replays a session's chain up to a bundle in a new session,
// and keeps that session.
func (s *Server) ForkSession(ctx context.Context, req *pb.ForkSessionRequest) (*pb.ForkSessionResponse, error) {
	if req.GetFromBundle() == "" {
		return nil, status.Error(codes.InvalidArgument, "from_bundle: is empty")
	}
	rep, err := forkSession(ctx, s.svc, req.GetFromBundle(), s.svc.Config().DefaultRuntime)
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := s.svc.GetSession(ctx, rep.Session)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ForkSessionResponse{Session: sessionToProto(info), Reproduced: rep.Reproduced, FirstDiffering: rep.FirstDiffering, Warnings: rep.Warnings}, nil
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

// Fork is how a fork's replay went.
type Fork struct {
	Reproduced     bool
	FirstDiffering int64
	Warnings       []string
}

// ForkSession starts a new session from a call's bundle.
func (c *Client) ForkSession(ctx context.Context, fromBundle string) (session.Info, Fork, error) {
	resp, err := c.c.ForkSession(ctx, &pb.ForkSessionRequest{FromBundle: fromBundle})
	if err != nil {
		return session.Info{}, Fork{}, fromStatus(err)
	}
	return sessionFromProto(resp.GetSession()), Fork{resp.GetReproduced(), resp.GetFirstDiffering(), resp.GetWarnings()}, nil
}
