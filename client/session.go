package client

import (
	"context"

	"github.com/sandboxd/sandboxd/netpolicy"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"

	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/session"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Fork is how a fork's replay went.
type Fork struct {
	Reproduced     bool
	FirstDiffering int64
	Warnings       []string
}

// CreateSession starts a session.
func (c *Client) CreateSession(ctx context.Context, req session.Request) (session.Info, error) {
	info, err := c.c.CreateSession(ctx, &pb.CreateSessionRequest{
		Language: req.Language, Options: wire.OptionsToProto(req.Options), Ttl: durationpb.New(req.TTL), IdleTtl: durationpb.New(req.IdleTTL),
	})
	if err != nil {
		return session.Info{}, fromStatus(err)
	}
	return wire.SessionFromProto(info), nil
}

// GetSession reports a session.
func (c *Client) GetSession(ctx context.Context, id string) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.GetSession(ctx, &pb.GetSessionRequest{SessionId: id})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return wire.SessionFromProto(info), nil
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
		out = append(out, wire.SessionFromProto(i))
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
		return wire.SessionFromProto(info), nil
	})
}

// PauseSession saves a session to disk and removes its container.
func (c *Client) PauseSession(ctx context.Context, id string) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.PauseSession(ctx, &pb.PauseSessionRequest{SessionId: id})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return wire.SessionFromProto(info), nil
	})
}

// ResumeSession restores a paused session into a new container.
func (c *Client) ResumeSession(ctx context.Context, id string) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.ResumeSession(ctx, &pb.ResumeSessionRequest{SessionId: id})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return wire.SessionFromProto(info), nil
	})
}

// UpdateSessionNetwork changes a live session's network policy.
func (c *Client) UpdateSessionNetwork(ctx context.Context, id string, n netpolicy.Request) (session.Info, error) {
	return retryElsewhere(c, func(c *Client) (session.Info, error) {
		info, err := c.c.UpdateSessionNetwork(ctx, &pb.UpdateSessionNetworkRequest{SessionId: id, Network: wire.NetworkToProto(n)})
		if err != nil {
			return session.Info{}, fromStatus(err)
		}
		return wire.SessionFromProto(info), nil
	})
}

// ForkSession starts a new session from a call's bundle.
func (c *Client) ForkSession(ctx context.Context, fromBundle string) (session.Info, Fork, error) {
	resp, err := c.c.ForkSession(ctx, &pb.ForkSessionRequest{FromBundle: fromBundle})
	if err != nil {
		return session.Info{}, Fork{}, fromStatus(err)
	}
	return wire.SessionFromProto(resp.GetSession()), Fork{resp.GetReproduced(), resp.GetFirstDiffering(), resp.GetWarnings()}, nil
}
