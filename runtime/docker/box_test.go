package docker

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// removals is a Client whose forced removals fail with failures until
// the container is seen stopped, as dockerd's do when the container exits
// while it is killed for the removal.
type removals struct {
	Client
	failures int
	running  bool
	removes  int
	inspects int
}

func (r *removals) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	r.removes++
	if r.removes <= r.failures {
		return errors.New("Error response from daemon: Could not kill running container c, cannot remove - Container c is not running")
	}
	return nil
}

func (r *removals) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	r.inspects++
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: r.running}}}, nil
}

func TestRemoveTakesAContainerThatStoppedWhileKilled(t *testing.T) {
	c := &removals{failures: 1}
	b := &box{e: &port{client: c}, id: "c", name: "c", cancelWait: func() {}}
	if err := b.Remove(context.Background()); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if c.removes != 2 {
		t.Errorf("%d removals, want 2: the refused one and the one after the container stopped", c.removes)
	}
}

func TestRemoveGivesUpOnAContainerStillRunning(t *testing.T) {
	c := &removals{failures: 10, running: true}
	b := &box{e: &port{client: c}, id: "c", name: "c", cancelWait: func() {}}
	if err := b.Remove(context.Background()); err == nil {
		t.Fatal("Remove of a container that keeps running and refuses removal succeeded")
	}
	if c.removes != 1 || c.inspects == 0 {
		t.Errorf("%d removals after %d inspections, want 1: no second try while it runs", c.removes, c.inspects)
	}
}
