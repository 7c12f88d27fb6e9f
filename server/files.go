package server

import (
	"bytes"
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task"
)

// fileChunk is the size of the messages that carry files and bundles.
const fileChunk = 256 << 10

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
		return toStatus(err)
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
		return toStatus(err)
	}
	defer f.Close()
	return sendChunks(f, func(b []byte) error { return stream.Send(&pb.FileChunk{Data: b}) }, req.GetPath())
}

// sendChunks sends what r holds in messages of fileChunk bytes.
func sendChunks(r io.Reader, send func([]byte) error, what string) error {
	buf := make([]byte, fileChunk)
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
		return nil, toStatus(err)
	}
	return &pb.ListFilesResponse{Files: outputsToProto(files)}, nil
}

// GetFile streams an output file of a bundle.
func (s *Server) GetFile(req *pb.GetFileRequest, stream grpc.ServerStreamingServer[pb.FileChunk]) error {
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.FileChunk{Data: b}) }}
	if err := s.svc.GetFile(stream.Context(), req.GetBundleDigest(), req.GetPath(), w); err != nil {
		return toStatus(err)
	}
	return w.flush()
}

// chunkWriter sends what it is written in messages of fileChunk bytes.
type chunkWriter struct {
	send func([]byte) error
	buf  bytes.Buffer
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for w.buf.Len() >= fileChunk {
		if err := w.send(w.buf.Next(fileChunk)); err != nil {
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

// UploadFile writes what r holds into a session's /workspace at path.
func (c *Client) UploadFile(ctx context.Context, sessionID, path string, executable bool, r io.Reader) (task.FileInfo, error) {
	return retryElsewhere(c, func(c *Client) (task.FileInfo, error) {
		stream, err := c.c.UploadFile(ctx)
		if err != nil {
			return task.FileInfo{}, fromStatus(err)
		}
		if err := stream.Send(&pb.UploadFileRequest{Part: &pb.UploadFileRequest_Header{Header: &pb.UploadHeader{SessionId: sessionID, Path: path, Executable: executable}}}); err != nil {
			_, err = stream.CloseAndRecv()
			return task.FileInfo{}, fromStatus(err)
		}
		buf := make([]byte, fileChunk)
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 {
				if err := stream.Send(&pb.UploadFileRequest{Part: &pb.UploadFileRequest_Data{Data: buf[:n]}}); err != nil {
					// The server ended the stream: its answer says why.
					_, err = stream.CloseAndRecv()
					return task.FileInfo{}, fromStatus(err)
				}
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return task.FileInfo{}, rerr
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			return task.FileInfo{}, fromStatus(err)
		}
		return task.FileInfo{Path: resp.GetPath(), Size: resp.GetSize(), SHA256: resp.GetSha256()}, nil
	})
}

// ReadFile opens a file of a session's /workspace.
func (c *Client) ReadFile(ctx context.Context, sessionID, path string) (io.ReadCloser, error) {
	return retryElsewhere(c, func(c *Client) (io.ReadCloser, error) {
		ctx, cancel := context.WithCancel(ctx)
		stream, err := c.c.ReadFile(ctx, &pb.ReadFileRequest{SessionId: sessionID, Path: path})
		return firstChunk[pb.FileChunk](stream, err, cancel)
	})
}

// GetFile opens an output file of a stored bundle.
func (c *Client) GetFile(ctx context.Context, digest, path string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.c.GetFile(ctx, &pb.GetFileRequest{BundleDigest: digest, Path: path})
	return firstChunk[pb.FileChunk](stream, err, cancel)
}

// ListFiles lists a session's /workspace below path.
func (c *Client) ListFiles(ctx context.Context, sessionID, path string) ([]artifacts.Output, error) {
	return retryElsewhere(c, func(c *Client) ([]artifacts.Output, error) {
		resp, err := c.c.ListFiles(ctx, &pb.ListFilesRequest{SessionId: sessionID, Path: path})
		if err != nil {
			return nil, fromStatus(err)
		}
		return outputsFromProto(resp.GetFiles()), nil
	})
}
