package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/docker/docker/client"
)

// LoadImage loads an image archive (docker-archive format) into Docker
// at host (empty: DOCKER_HOST or the default socket).
func LoadImage(ctx context.Context, host string, archive io.Reader) error {
	c, err := loadClient(host)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.ImageLoad(ctx, archive, client.ImageLoadWithQuiet(true))
	if err != nil {
		return dockerError("load image", err)
	}
	defer resp.Body.Close()
	// Docker answers 200 and reports a failure in its message stream.
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("load image: Docker's answer: %w", err)
		}
		if msg.Error != "" {
			return fmt.Errorf("load image: %s", msg.Error)
		}
	}
}

// Answers says whether Docker at host answers.
func Answers(ctx context.Context, host string) bool {
	c, err := loadClient(host)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Ping(ctx)
	return err == nil
}

// HasImage says whether Docker at host has the image id.
func HasImage(ctx context.Context, host, id string) bool {
	c, err := loadClient(host)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.ImageInspect(ctx, id)
	return err == nil
}

func loadClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.NewClientWithOpts(opts...)
}

// SaveImage writes the image called name, which must be the image id, as
// a docker-archive: how an image Docker has reaches another backend's
// store without being built again.
func SaveImage(ctx context.Context, host, name, id string) (io.ReadCloser, error) {
	c, err := loadClient(host)
	if err != nil {
		return nil, err
	}
	inspect, err := c.ImageInspect(ctx, name)
	if err != nil {
		c.Close()
		return nil, dockerError("inspect image", err)
	}
	if inspect.ID != id {
		c.Close()
		return nil, fmt.Errorf("the image %s in Docker is %s, not %s", name, inspect.ID, id)
	}
	rc, err := c.ImageSave(ctx, []string{name})
	if err != nil {
		c.Close()
		return nil, dockerError("save image", err)
	}
	return closeBoth{rc, c}, nil
}

// closeBoth closes the archive's stream, then its client.
type closeBoth struct {
	io.ReadCloser
	c *client.Client
}

func (b closeBoth) Close() error { return errors.Join(b.ReadCloser.Close(), b.c.Close()) }
