package runtime

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

var numericUser = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

// Validate refuses a spec that would weaken a container's isolation or that
// an engine would reject late. A prepared container's spec (see Preparer)
// has no argv or output yet.
func (s Spec) Validate(prepared bool) error {
	bad := func(msg string) error { return errdefs.ErrInvalidArgument.WithMessage("spec: " + msg) }
	switch {
	case s.ID == "":
		return bad("empty ID")
	case s.Image == "":
		return bad("empty image")
	case !prepared && len(s.Argv) == 0:
		return bad("empty argv")
	case !path.IsAbs(s.WorkingDir):
		return bad(fmt.Sprintf("working directory %q is not absolute", s.WorkingDir))
	case !numericUser.MatchString(s.User):
		return bad(fmt.Sprintf("user %q is not UID:GID", s.User))
	case !prepared && (s.Stdout == nil || s.Stderr == nil):
		return bad("stdout and stderr are required")
	case s.Resources.MemoryBytes <= 0 || s.Resources.CPUMillis <= 0 || s.Resources.Pids <= 0 || s.Resources.NoFile <= 0:
		return bad("every resource limit must be set")
	}
	if uid, gid := s.IDs(); uid == 0 || gid == 0 {
		return bad("user and group must not be root")
	}
	return nil
}

// IDs returns the numeric user and group of s.User.
func (s Spec) IDs() (uid, gid uint32) {
	u, g, _ := strings.Cut(s.User, ":")
	uid64, _ := strconv.ParseUint(u, 10, 32)
	gid64, _ := strconv.ParseUint(g, 10, 32)
	return uint32(uid64), uint32(gid64)
}
