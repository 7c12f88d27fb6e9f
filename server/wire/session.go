package wire

import (
	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var SessionStateToProto = map[session.State]pb.SessionState{
	session.Active:  pb.SessionState_SESSION_STATE_ACTIVE,
	session.Deleted: pb.SessionState_SESSION_STATE_DELETED,
	session.Expired: pb.SessionState_SESSION_STATE_EXPIRED,
	session.Failed:  pb.SessionState_SESSION_STATE_FAILED,
	session.Lost:    pb.SessionState_SESSION_STATE_LOST,
	session.Paused:  pb.SessionState_SESSION_STATE_PAUSED,
}

var SessionStateFromProto = inverse(SessionStateToProto)

func SessionToProto(i session.Info) *pb.SessionInfo {
	return &pb.SessionInfo{
		SessionId: i.ID, State: SessionStateToProto[i.State], Reason: i.Reason, Language: i.Language,
		Image: i.Image, ImageDigest: i.ImageDigest, Runtime: i.Runtime, Limits: LimitsToProto(i.Limits), Labels: i.Labels,
		CreatedAt: timestamppb.New(i.CreatedAt), LastUsedAt: timestamppb.New(i.LastUsedAt),
		ExpiresAt: timestamppb.New(i.ExpiresAt), IdleExpiresAt: timestamppb.New(i.IdleExpiresAt),
		Calls: i.Calls, LastBundle: i.LastBundle, Start: string(i.Start), Tenant: i.Tenant, Network: PolicyToProto(i.Network),
	}
}

func SessionFromProto(i *pb.SessionInfo) session.Info {
	return session.Info{
		ID: i.GetSessionId(), State: SessionStateFromProto[i.GetState()], Reason: i.GetReason(), Language: i.GetLanguage(),
		Image: i.GetImage(), ImageDigest: i.GetImageDigest(), Runtime: i.GetRuntime(), Limits: AnsweredLimits(i.GetLimits()),
		Labels: i.GetLabels(), CreatedAt: i.GetCreatedAt().AsTime(), LastUsedAt: i.GetLastUsedAt().AsTime(),
		ExpiresAt: i.GetExpiresAt().AsTime(), IdleExpiresAt: i.GetIdleExpiresAt().AsTime(),
		Calls: i.GetCalls(), LastBundle: i.GetLastBundle(), Start: run.StartPath(i.GetStart()), Tenant: i.GetTenant(),
		Network: PolicyFromProto(i.GetNetwork()),
	}
}

func SessionCallToProto(c *artifacts.Session) *pb.SessionCall {
	if c == nil {
		return nil
	}
	return &pb.SessionCall{SessionId: c.ID, Seq: c.Seq, ParentBundle: c.ParentBundle, WorkspaceBefore: c.WorkspaceBefore, WorkspaceAfter: c.WorkspaceAfter}
}

func SessionCallFromProto(c *pb.SessionCall) *artifacts.Session {
	if c == nil {
		return nil
	}
	return &artifacts.Session{ID: c.GetSessionId(), Seq: c.GetSeq(), ParentBundle: c.GetParentBundle(), WorkspaceBefore: c.GetWorkspaceBefore(), WorkspaceAfter: c.GetWorkspaceAfter()}
}

func KernelToProto(k *artifacts.KernelReply) *pb.KernelReply {
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

func KernelFromProto(k *pb.KernelReply) *artifacts.KernelReply {
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
