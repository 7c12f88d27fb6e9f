package server

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/task"
)

// toStatus translates an engine error into a gRPC status, once, at the edge.
// A refusal for lack of capacity carries a RetryInfo with the hint.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var busy *task.BusyError
	if errors.As(err, &busy) {
		st := status.New(codes.ResourceExhausted, err.Error())
		if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(busy.RetryAfter)}); derr == nil {
			st = withInfo
		}
		return st.Err()
	}
	var missing *task.ImageMissingError
	if errors.As(err, &missing) {
		st := status.New(codes.FailedPrecondition, err.Error())
		if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonImageNotPresent, Domain: ErrorDomain,
			Metadata: map[string]string{"image": missing.Ref}}); derr == nil {
			st = withInfo
		}
		return st.Err()
	}
	return status.Error(codeOf(err), err.Error())
}

// Error details that clients can act on.
const (
	// ErrorDomain is the domain of sandboxd's ErrorInfo details.
	ErrorDomain = "sandboxd.dev"
	// ReasonImageNotPresent: the requested image is not in the engine.
	ReasonImageNotPresent = "IMAGE_NOT_PRESENT"
)

func codeOf(err error) codes.Code {
	switch {
	case errdefs.IsInvalidArgument(err):
		return codes.InvalidArgument
	case errdefs.IsNotFound(err):
		return codes.NotFound
	case errdefs.IsAlreadyExists(err):
		return codes.AlreadyExists
	case errdefs.IsPermissionDenied(err):
		return codes.PermissionDenied
	case errdefs.IsResourceExhausted(err):
		return codes.ResourceExhausted
	case errdefs.IsFailedPrecondition(err), errdefs.IsConflict(err), errdefs.IsNotModified(err):
		return codes.FailedPrecondition
	case errdefs.IsUnavailable(err):
		return codes.Unavailable
	case errdefs.IsNotImplemented(err):
		return codes.Unimplemented
	case errdefs.IsUnauthorized(err):
		return codes.Unauthenticated
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}
