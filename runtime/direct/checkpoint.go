package direct

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

var (
	_ lifecycle.Checkpointing = (*port)(nil)
	_ lifecycle.CheckpointBox = (*box)(nil)
)

// Checkpoints says whether containers of the OCI runtime name can be
// saved: gVisor's can (runsc checkpoint and restore, with the sandbox's
// memory and its stdio restored onto new pipes). runc and crun checkpoint
// through CRIU, which must carry the session's host pipes and, under
// them, its control connection, an external socket: not done yet, and
// on a host where `criu check` fails, not possible at all.
func (p *port) Checkpoints(name string) error {
	if name == "" {
		name = runtime.RuncName
	}
	if name == runtime.RunscName {
		if _, ok := p.runtimes[name]; !ok {
			return fmt.Errorf("runsc is not installed on this host")
		}
		return nil
	}
	if why := criuCheck(); why != "" {
		return fmt.Errorf("sessions under %s cannot be checkpointed: CRIU, through which it would, cannot run on this host (criu check: %s); under gVisor (runsc) they can", name, why)
	}
	return fmt.Errorf("sessions under %s cannot be checkpointed yet (their init's control connection would need CRIU's external sockets); under gVisor (runsc) they can", name)
}

// criuCheck is what `criu check` says is wrong on this host, once, or "".
var criuCheck = sync.OnceValue(func() string {
	out, err := exec.Command("criu", "check").CombinedOutput()
	if err == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return err.Error()
	}
	return lines[0]
})

// Checkpoint saves the container with its OCI runtime's checkpoint; the
// run process ends with the container unless leave.
func (b *box) Checkpoint(ctx context.Context, dir string, leave bool) error {
	args := []string{"checkpoint", "--image-path", dir}
	if leave {
		args = append(args, "--leave-running")
	}
	return b.rt.run(ctx, append(args, b.name)...)
}
