package server

import (
	"errors"

	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
)

// ToStatus translates an engine error into a gRPC status, once, at the edge.
// Refusals carry what a client can act on: when to retry, the quota met,
// where to call instead, the image missing.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if isStatus(err) {
		return err
	}
	var busy *task.BusyError
	var draining *task.DrainingError
	var elsewhere *task.ElsewhereError
	var missing *task.ImageMissingError
	switch {
	case errors.As(err, &busy):
		// The subject is whose quota was met: the daemon's, or a tenant's.
		subject := "sandboxd"
		if busy.Tenant != "" {
			subject = "tenant:" + busy.Tenant
		}
		return detailed(codes.ResourceExhausted, err,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(busy.RetryAfter)},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: subject, Description: busy.Quota + ": " + err.Error()}}})
	case errors.As(err, &draining):
		return detailed(codes.Unavailable, err, &errdetails.RetryInfo{RetryDelay: durationpb.New(draining.RetryAfter)})
	case errors.As(err, &elsewhere):
		return detailed(codes.FailedPrecondition, err, &errdetails.ErrorInfo{Reason: wire.ReasonElsewhere, Domain: wire.ErrorDomain,
			Metadata: map[string]string{"address": elsewhere.Peer.Addr, "daemon": elsewhere.Peer.Name, "kind": elsewhere.What, "id": elsewhere.ID}})
	case errors.As(err, &missing):
		return detailed(codes.FailedPrecondition, err, &errdetails.ErrorInfo{Reason: wire.ReasonImageNotPresent, Domain: wire.ErrorDomain,
			Metadata: map[string]string{"image": missing.Ref}})
	}
	if mapped := errgrpc.ToGRPC(err); isStatus(mapped) {
		return mapped
	}
	// Not of a class the engine names: sandboxd's own failure.
	return status.Error(codes.Internal, err.Error())
}

// detailed is the status of code with err's message and details; without
// the details if they cannot be attached.
func detailed(code codes.Code, err error, details ...protoadapt.MessageV1) error {
	st := status.New(code, err.Error())
	if withDetails, derr := st.WithDetails(details...); derr == nil {
		st = withDetails
	}
	return st.Err()
}

func isStatus(err error) bool {
	_, ok := status.FromError(err)
	return ok
}
