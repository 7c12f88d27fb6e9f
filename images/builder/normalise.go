package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// removed are what two builds of the same packages would not have the
// same and no task needs: logs, caches, apt's lists and the mirror it came
// from, backups, machine ids, device nodes (every runtime mounts its own
// /dev), and documentation.
var removed = []string{
	"var/log/*", "var/cache/apt/*", "var/lib/apt/lists/*", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
	"var/cache/ldconfig/aux-cache", "var/cache/fontconfig/*", "var/cache/man/*",
	"etc/machine-id", "var/lib/dbus/machine-id", "etc/*-", "etc/apt/sources.list", "dev/*", "run/*",
	"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*",
}

// fixed are files debootstrap copies from the building host; the runtimes
// mount their own over them.
var fixed = map[string]string{
	"etc/hostname":    "sandbox\n",
	"etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
	"etc/resolv.conf": "",
}

// normalise makes the tree the same on every build of the same packages.
// Times are not touched here: the archive gives every file one.
func normalise(ctx context.Context, root string, log io.Writer) error {
	for _, pattern := range removed {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	for p, content := range fixed {
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			return err
		}
	}
	// The day each password was last changed is the day of the build.
	if err := clearField(filepath.Join(root, "etc/shadow"), 2); err != nil {
		return err
	}
	if err := bytecode(ctx, root, log); err != nil {
		return err
	}
	// The loader's cache is made again from the libraries alone.
	if err := chroot(ctx, root, log, "ldconfig"); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(root, "var/cache/ldconfig/aux-cache"))
}

// clearField empties field n (from 0) of each colon-separated line.
func clearField(path string, n int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		f := strings.Split(l, ":")
		if len(f) > n {
			f[n] = ""
		}
		lines[i] = strings.Join(f, ":")
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o640)
}

// bytecode compiles every Python module again, as bytecode checked by
// nothing: the packages' own bytecode names each source's time, which the
// archive changes, and the root is read-only, so a stale file would be
// compiled again at every import. Without Python there is nothing to do.
func bytecode(ctx context.Context, root string, log io.Writer) error {
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		return nil
	}
	dirs, err := filepath.Glob(filepath.Join(root, "usr/lib/python3*"))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == "__pycache__" {
				if err := os.RemoveAll(p); err != nil {
					return err
				}
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// One compiler per folder, side by side; compileall's own workers
	// need a /dev/shm the tree has not.
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for i, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A module that does not compile (Python 2 examples some
			// packages ship) is left without bytecode, as before.
			errs[i] = chroot(ctx, root, log, "python3", "-m", "compileall", "-q", "-q", "-f",
				"--invalidation-mode", "unchecked-hash", "/"+strings.TrimPrefix(d, root+"/"))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !isExit(err, 1) {
			return err
		}
	}
	return nil
}

// chroot runs argv in root, with the determinism of a build.
func chroot(ctx context.Context, root string, log io.Writer, argv ...string) error {
	cmd := exec.CommandContext(ctx, "chroot", append([]string{root}, argv...)...)
	// An interpreter writes the bytecode of what it imports at start
	// (sitecustomize): that would race with the compilers beside it.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "SOURCE_DATE_EPOCH=0", "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1"}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s in the tree: %w", strings.Join(argv, " "), err)
	}
	return nil
}

func isExit(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}
