package lifecycle

import (
	"context"
	"debug/buildinfo"
	"os/exec"
	"strings"
	"time"
)

// BinaryVersion reports the version of the OCI runtime binary at path: what
// `path --version` says (runc, Debian's runsc), or, for a Go binary built
// without a version stamp (runsc from `go install`, which says
// VERSION_MISSING), the module version Go recorded in it. It returns ""
// when neither is known.
func BinaryVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err == nil {
		if v := parseVersion(string(out)); v != "" && v != "VERSION_MISSING" {
			return v
		}
	}
	if info, err := buildinfo.ReadFile(path); err == nil && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Path + " " + info.Main.Version
	}
	return ""
}

// parseVersion takes "NAME version X" from the first line of --version.
func parseVersion(out string) string {
	line, _, _ := strings.Cut(out, "\n")
	_, v, ok := strings.Cut(line, " version ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}
