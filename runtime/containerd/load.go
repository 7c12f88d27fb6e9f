package containerd

import (
	"context"
	"fmt"
	"io"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
)

// LoadImage imports an image archive (docker-archive format) into
// containerd's namespace at address, named as the archive names it
// (docker.io/NAME:TAG), and unpacks it, so that the first task of the
// image does not pay for that.
func LoadImage(ctx context.Context, address, namespace string, archive io.Reader) error {
	c, err := client.New(address, client.WithDefaultNamespace(namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("containerd at %s does not answer: %w: %w", address, err, errdefs.ErrUnavailable)
	}
	defer c.Close()
	imgs, err := c.Import(ctx, archive)
	if err != nil {
		return containerdError("import image", err)
	}
	for _, img := range imgs {
		if err := client.NewImage(c, img).Unpack(ctx, snapshotter); err != nil {
			return containerdError("unpack image "+img.Name, err)
		}
	}
	return nil
}

// Answers says whether containerd answers at address.
func Answers(ctx context.Context, address string) bool {
	c, err := client.New(address, client.WithTimeout(2*time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Version(ctx)
	return err == nil
}

// HasImage says whether the namespace has an image whose config is id.
func HasImage(ctx context.Context, address, namespace, id string) bool {
	c, err := client.New(address, client.WithDefaultNamespace(namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	list, err := c.ListImages(ctx)
	if err != nil {
		return false
	}
	for _, img := range list {
		if cfg, err := img.Config(ctx); err == nil && cfg.Digest.String() == id {
			return true
		}
	}
	return false
}
