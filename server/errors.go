package server

import (
	"errors"

	"github.com/containerd/errdefs/pkg/errgrpc"
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
	if isStatus(err) {
		return err
	}
	var busy *task.BusyError
	if errors.As(err, &busy) {
		st := status.New(codes.ResourceExhausted, err.Error())
		// The subject is whose quota was met: the daemon's, or a tenant's.
		subject := "sandboxd"
		if busy.Tenant != "" {
			subject = "tenant:" + busy.Tenant
		}
		if withInfo, derr := st.WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(busy.RetryAfter)},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: subject, Description: busy.Quota + ": " + err.Error()}}},
		); derr == nil {
			st = withInfo
		}
		return st.Err()
	}
	var draining *task.DrainingError
	if errors.As(err, &draining) {
		st := status.New(codes.Unavailable, err.Error())
		if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(draining.RetryAfter)}); derr == nil {
			st = withInfo
		}
		return st.Err()
	}
	var elsewhere *task.ElsewhereError
	if errors.As(err, &elsewhere) {
		st := status.New(codes.FailedPrecondition, err.Error())
		if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonElsewhere, Domain: ErrorDomain,
			Metadata: map[string]string{"address": elsewhere.Peer.Addr, "daemon": elsewhere.Peer.Name, "kind": elsewhere.What, "id": elsewhere.ID}}); derr == nil {
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
	if mapped := errgrpc.ToGRPC(err); isStatus(mapped) {
		return mapped
	}
	// Not of a class the engine names: sandboxd's own failure.
	return status.Error(codes.Internal, err.Error())
}

// Error details that clients can act on.
const (
	// ErrorDomain is the domain of sandboxd's ErrorInfo details.
	ErrorDomain = "sandboxd.dev"
	// ReasonImageNotPresent: the requested image is not in the engine.
	ReasonImageNotPresent = "IMAGE_NOT_PRESENT"
	// ReasonElsewhere: another daemon of the cluster holds the run or
	// session; metadata "address" says where to call, "daemon" its name.
	ReasonElsewhere = "ELSEWHERE"
)

func isStatus(err error) bool {
	_, ok := status.FromError(err)
	return ok
}
