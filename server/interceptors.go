package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/internal/edge/budget"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/task/access"
)

// Options configure a gRPC server.
type Options struct {
	// Identities, when set, name the callers of a network listener by
	// their bearer token ("authorization: Bearer TOKEN") or client
	// certificate; every call but health checks must name one.
	Identities *access.Identities
	// Caller is who calls on a listener without Identities (access.Operator
	// on the daemon's socket): it decides what a call may ask for.
	Caller access.Caller
	// MaxRecvBytes is the largest request accepted; it should admit the
	// engine's bounds so that oversize fields are refused by name.
	MaxRecvBytes int
	// Budget bounds what the requests in flight hold, with the daemon's
	// other listeners; nil for no bound.
	Budget *budget.Budget
	// ReadTimeout bounds how long a request may take to arrive.
	ReadTimeout time.Duration
	// TLS, when set, serves TLS with this configuration; when it requires
	// client certificates, a caller is named by its certificate's common
	// name.
	TLS *tls.Config
	// Audit, when set, gets a line per call that names no caller; the
	// engine records the rest.
	Audit *audit.Log
	// Log receives panics of handlers (default slog.Default()).
	Log *slog.Logger
	// Metrics, when set, counts every call by service, method and code,
	// and times it (grpc_server_*).
	Metrics *grpcprom.ServerMetrics
}

// maxStreamsPerConn bounds the calls one connection has at once.
const maxStreamsPerConn = 64

// recoverUnary turns a handler's panic into an INTERNAL error, so that one
// bug does not take down the daemon and every task running in it.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
		defer recoverInto(log, info.FullMethod, &err)
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer recoverInto(log, info.FullMethod, &err)
		return handler(srv, ss)
	}
}

func recoverInto(log *slog.Logger, method string, err *error) {
	if p := recover(); p != nil {
		if log == nil {
			log = slog.Default()
		}
		log.Error("handler panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "sandboxd failed on %s; see its log", method)
	}
}

// identify names the caller of every call: the listener's own (the
// operator, on the daemon's socket), or on a network listener the one its
// bearer token or verified client certificate names. A call on a network
// listener that names none is refused, and recorded, but health checks.
type identify struct {
	fixed access.Caller
	ids   *access.Identities
	audit *audit.Log
	log   *slog.Logger
}

func (i identify) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := i.of(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (i identify) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := i.of(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
}

// of is ctx with the caller of one call, from the client's address, by
// method.
func (i identify) of(ctx context.Context, method string) (context.Context, error) {
	c, ok := i.fixed, true
	if i.ids != nil {
		c, ok = i.ids.Identify(callerToken(ctx), certName(ctx))
	}
	c.Peer, c.Method = peerAddr(ctx), method
	if !ok && !strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		if i.audit != nil {
			err := i.audit.Record(audit.Event{Kind: audit.KindDecision, Peer: c.Peer, Method: method,
				Decision: audit.Refused, Code: "UNAUTHENTICATED", Reason: "no valid bearer token or client certificate"})
			if err != nil && i.log != nil {
				i.log.Error("audit log", "err", err)
			}
		}
		return nil, status.Error(codes.Unauthenticated, "a bearer token (authorization: Bearer TOKEN) or a client certificate of a tenant is required")
	}
	return access.WithCaller(ctx, c), nil
}

// callerToken is the token of the call's authorization header, if any.
func callerToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if token, ok := strings.CutPrefix(v, "Bearer "); ok {
			return token
		}
	}
	return ""
}

// certName is the common name of the client's verified certificate, if
// any.
func certName(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			return tlsconf.CertName(info.State)
		}
	}
	return ""
}

// peerAddr is the client's address: "unix" on the daemon's socket, whose
// clients have no address, and "" when gRPC does not know it.
func peerAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	switch {
	case !ok || p.Addr == nil:
		return ""
	case p.Addr.Network() == "unix":
		return "unix"
	}
	return p.Addr.String()
}

// contextStream is a stream with a context of its own.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// limit holds a share of the request budget for each streaming call (the
// calls that run tasks): the largest request while it is read, then its
// size, until the call ends. Past the budget, a call is refused before its
// request is read; a request that takes longer than readTimeout to arrive
// ends its call.
type limit struct {
	budget      *budget.Budget
	maxRecv     int64
	readTimeout time.Duration
}

func (l limit) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	h := l.budget.Hold(l.maxRecv)
	if h == nil {
		st := status.New(codes.ResourceExhausted, fmt.Sprintf("busy: the calls in flight hold the whole request budget of %d MiB", l.budget.Total()>>20))
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}); err == nil {
			st = withInfo
		}
		return st.Err()
	}
	defer h.Release()
	return handler(srv, &heldStream{ServerStream: ss, hold: h, readTimeout: l.readTimeout})
}

// heldStream lowers its call's hold to the request's size once read.
type heldStream struct {
	grpc.ServerStream
	hold        *budget.Hold
	readTimeout time.Duration
}

func (s *heldStream) RecvMsg(m any) error {
	if s.readTimeout <= 0 {
		return s.recv(m)
	}
	// The read goes on in the background when it times out: ending the
	// call ends the stream, and with it the read.
	done := make(chan error, 1)
	go func() { done <- s.recv(m) }()
	timer := time.NewTimer(s.readTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the request did not arrive within %v", s.readTimeout)
	}
}

func (s *heldStream) recv(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if msg, ok := m.(proto.Message); ok && err == nil {
		s.hold.Shrink(int64(proto.Size(msg)))
	}
	return err
}
