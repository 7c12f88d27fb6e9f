package task

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/cluster"
)

// ElsewhereError says that another daemon of the cluster holds a run or a
// session, or owns an idempotency key: the call is to be made there. It is
// a failed precondition.
type ElsewhereError struct {
	// What is "run", "session" or "idempotency key"; ID is its id or
	// the key.
	What, ID string
	Peer     cluster.Peer
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("%s %s is held by sandboxd %s at %s: call there", e.What, e.ID, e.Peer.Name, e.Peer.Addr)
}

// FailedPrecondition marks ElsewhereError for errdefs.
func (e *ElsewhereError) FailedPrecondition() {}

// unknownRun is the answer for a run this daemon does not hold for the
// caller: where it is, when a peer made it, or NOT_FOUND.
func (s *Service) unknownRun(id string) error {
	if peer, ok := s.peers.Locate(id); ok {
		return &ElsewhereError{What: "run", ID: id, Peer: peer}
	}
	return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("run %q is not known (finished runs are kept for a while only)", id))
}

// unknownSession is unknownRun for a session; field names the request's
// field that gave id, if any.
func (s *Service) unknownSession(field, id string) error {
	if peer, ok := s.peers.Locate(id); ok {
		return &ElsewhereError{What: "session", ID: id, Peer: peer}
	}
	msg := fmt.Sprintf("session %q is not known", id)
	if field != "" {
		msg = field + ": " + msg
	}
	return errdefs.ErrNotFound.WithMessage(msg)
}

type sentHereKey struct{}

// SentHere marks ctx as a call another daemon sent here: it is served
// here, not sent on, so that daemons whose views of the cluster differ for
// a moment do not send it back and forth.
func SentHere(ctx context.Context) context.Context {
	return context.WithValue(ctx, sentHereKey{}, true)
}

func sentHere(ctx context.Context) bool {
	v, _ := ctx.Value(sentHereKey{}).(bool)
	return v
}
