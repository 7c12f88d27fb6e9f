package server

import (
	"bytes"
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
)

// UploadFile writes a streamed file into a session.
func (s *Server) UploadFile(stream grpc.ClientStreamingServer[pb.UploadFileRequest, pb.UploadFileResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "header: the first message must name the file")
	}
	if h.GetSessionId() == "" {
		return status.Error(codes.InvalidArgument, "header.session_id: is empty")
	}
	info, err := s.svc.UploadFile(stream.Context(), h.GetSessionId(), h.GetPath(), h.GetExecutable(), &uploadReader{stream: stream})
	if err != nil {
		var bad badPart
		if errors.As(err, &bad) {
			return status.Error(codes.InvalidArgument, bad.Error())
		}
		return ToStatus(err)
	}
	return stream.SendAndClose(&pb.UploadFileResponse{Path: info.Path, Size: info.Size, Sha256: info.SHA256})
}

// uploadReader reads the data messages that follow an upload's header.
type uploadReader struct {
	stream grpc.ClientStreamingServer[pb.UploadFileRequest, pb.UploadFileResponse]
	buf    []byte
}

type badPart struct{ error }

func (r *uploadReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err // io.EOF ends the file
		}
		if msg.GetHeader() != nil {
			return 0, badPart{errors.New("header: only the first message names the file")}
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// ReadFile streams a file of a session.
func (s *Server) ReadFile(req *pb.ReadFileRequest, stream grpc.ServerStreamingServer[pb.FileChunk]) error {
	f, err := s.svc.ReadFile(stream.Context(), req.GetSessionId(), req.GetPath())
	if err != nil {
		return ToStatus(err)
	}
	defer f.Close()
	return sendChunks(f, func(b []byte) error { return stream.Send(&pb.FileChunk{Data: b}) }, req.GetPath())
}

// sendChunks sends what r holds in messages of wire.FileChunk bytes.
func sendChunks(r io.Reader, send func([]byte) error, what string) error {
	buf := make([]byte, wire.FileChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return status.Error(codes.Internal, "read "+what+": "+err.Error())
		}
	}
}

// ListFiles lists a session's /workspace.
func (s *Server) ListFiles(ctx context.Context, req *pb.ListFilesRequest) (*pb.ListFilesResponse, error) {
	files, err := s.svc.ListFiles(ctx, req.GetSessionId(), req.GetPath())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ListFilesResponse{Files: wire.OutputsToProto(files)}, nil
}

// GetFile streams an output file of a bundle.
func (s *Server) GetFile(req *pb.GetFileRequest, stream grpc.ServerStreamingServer[pb.FileChunk]) error {
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.FileChunk{Data: b}) }}
	if err := s.svc.GetFile(stream.Context(), req.GetBundleDigest(), req.GetPath(), w); err != nil {
		return ToStatus(err)
	}
	return w.flush()
}

// chunkWriter sends what it is written in messages of wire.FileChunk bytes.
type chunkWriter struct {
	send func([]byte) error
	buf  bytes.Buffer
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for w.buf.Len() >= wire.FileChunk {
		if err := w.send(w.buf.Next(wire.FileChunk)); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *chunkWriter) flush() error {
	if w.buf.Len() == 0 {
		return nil
	}
	return w.send(w.buf.Bytes())
}
