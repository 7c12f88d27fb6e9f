package client

import (
	"context"
	"errors"
	"io"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
)

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
		buf := make([]byte, wire.FileChunk)
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
		return wire.OutputsFromProto(resp.GetFiles()), nil
	})
}
