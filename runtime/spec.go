package runtime

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/containerd/errdefs"
)

var numericUser = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

// module is a dotted Python module name, or a Node.js package's
// (@scope/name/path, no relative or absolute path).
var module = regexp.MustCompile(`^@?[A-Za-z_][A-Za-z0-9_-]*([./][A-Za-z_][A-Za-z0-9_-]*)*$`)

// Validate refuses a spec that would weaken a container's isolation or that
// a backend would reject late. A prepared container's spec (see Preparer)
// has no task yet: argv and output come with Launch.
func (s Spec) Validate(prepared bool) error {
	switch {
	case s.ID == "":
		return invalid("empty ID")
	case s.Image == "":
		return invalid("empty image")
	case !path.IsAbs(s.WorkingDir):
		return invalid(fmt.Sprintf("working directory %q is not absolute", s.WorkingDir))
	case !numericUser.MatchString(s.User):
		return invalid(fmt.Sprintf("user %q is not UID:GID", s.User))
	case !s.Resources.set():
		return invalid("every resource limit must be set")
	case s.ControlDir != "" && !path.IsAbs(s.ControlDir):
		return invalid(fmt.Sprintf("control folder %q is not absolute", s.ControlDir))
	}
	if uid, gid := s.IDs(); uid == 0 || gid == 0 {
		return invalid("user and group must not be root")
	}
	if p := s.Prestart; p != nil {
		if !slices.Contains(PrestartLanguages, p.Language) {
			return invalid(fmt.Sprintf("no interpreter of %q can be pre-started (%q can)", p.Language, PrestartLanguages))
		}
		if p.Interpreter == "" || !text(p.Interpreter) {
			return invalid("the pre-started interpreter has no command")
		}
		for _, m := range p.Modules {
			if !module.MatchString(m) {
				return invalid(fmt.Sprintf("%q is not a module to pre-load", m))
			}
		}
	}
	if prepared {
		return nil
	}
	return s.Task().Validate()
}

// Validate refuses a task that a container cannot be given: argv and
// environment travel to the init as text, so they are UTF-8 without NUL.
func (t Task) Validate() error {
	switch {
	case len(t.Argv) == 0:
		return invalid("empty argv")
	case !path.IsAbs(t.WorkingDir):
		return invalid(fmt.Sprintf("working directory %q is not absolute", t.WorkingDir))
	case t.Stdout == nil || t.Stderr == nil:
		return invalid("stdout and stderr are required")
	case !t.Resources.set():
		return invalid("every resource limit must be set")
	case t.Tools != nil && t.Prestarted:
		return invalid("a tool channel needs a program started afresh, not in a pre-started interpreter")
	}
	for i, a := range t.Argv {
		if !text(a) {
			return invalid(fmt.Sprintf("argv[%d] is not UTF-8 text without NUL", i))
		}
	}
	for i, kv := range t.Env {
		if !text(kv) || !strings.Contains(kv, "=") {
			return invalid(fmt.Sprintf("env[%d] is not KEY=VALUE in UTF-8 text without NUL", i))
		}
	}
	return nil
}

func (r Resources) set() bool {
	return r.MemoryBytes > 0 && r.CPUMillis > 0 && r.Pids > 0 && r.NoFile > 0
}

func text(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func invalid(msg string) error { return errdefs.ErrInvalidArgument.WithMessage("spec: " + msg) }

// IDs returns the numeric user and group of s.User.
func (s Spec) IDs() (uid, gid uint32) {
	u, g, _ := strings.Cut(s.User, ":")
	uid64, _ := strconv.ParseUint(u, 10, 32)
	gid64, _ := strconv.ParseUint(g, 10, 32)
	return uint32(uid64), uint32(gid64)
}
