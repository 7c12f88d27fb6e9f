package server

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/task"
)

// Options configure a gRPC server.
type Options struct {
	// Token, when set, is the bearer token every call but health checks
	// must carry ("authorization: Bearer TOKEN").
	Token string
	// Caller is who calls on this server's listener (task.Operator on the
	// daemon's socket): it decides what a call may ask for.
	Caller task.Caller
	// MaxRecvBytes is the largest request accepted; it should admit the
	// engine's bounds so that oversize fields are refused by name.
	MaxRecvBytes int
	// Log receives panics of handlers (default slog.Default()).
	Log *slog.Logger
}

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

// caller says who calls, for every call on a listener.
type caller task.Caller

func (c caller) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(task.WithCaller(ctx, task.Caller(c)), req)
}

func (c caller) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &contextStream{ServerStream: ss, ctx: task.WithCaller(ss.Context(), task.Caller(c))})
}

// contextStream is a stream with a context of its own.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// bearer checks the authorization header of every call but health checks.
type bearer string

func (b bearer) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		token, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(token), []byte(b)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "a bearer token is required (authorization: Bearer TOKEN)")
}

func (b bearer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := b.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (b bearer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := b.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
