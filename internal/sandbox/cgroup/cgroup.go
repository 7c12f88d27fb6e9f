// Package cgroup manages the parent cgroups under which backends start task
// containers. A container's own cgroup disappears when it exits; its parent
// stays, and still holds the container's peak memory use, which is how a
// backend reports peak memory after the fact. It reads cgroup v1 (cgroupfs
// hierarchy per controller) and v2 (unified) file systems.
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Daemons is the cgroup below which each daemon instance has its own
// (InstanceParent), the parent of its containers' parent cgroups.
const Daemons = "/sandboxd"

// InstanceParent is the cgroup of the daemon named instance: one child per
// container it has not removed yet.
func InstanceParent(instance string) string { return path.Join(Daemons, instance) }

// Hierarchy is a cgroup file system mounted at Root.
type Hierarchy struct {
	root    string
	unified bool
}

// Open inspects the cgroup file system at root (normally /sys/fs/cgroup).
func Open(root string) (Hierarchy, error) {
	if _, err := os.Stat(filepath.Join(root, "memory")); err == nil {
		return Hierarchy{root: root}, nil
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return Hierarchy{root: root, unified: true}, nil
	}
	return Hierarchy{}, fmt.Errorf("no cgroup v1 memory controller or cgroup v2 hierarchy at %s", root)
}

// Unified says whether this is a cgroup v2 hierarchy.
func (h Hierarchy) Unified() bool { return h.unified }

// controllerDirs returns the folders that hold the cgroup at path, one per
// mounted v1 controller, or the one v2 folder.
func (h Hierarchy) controllerDirs(path string) ([]string, error) {
	if h.unified {
		return []string{filepath.Join(h.root, path)}, nil
	}
	entries, err := os.ReadDir(h.root)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		// Skip the symlinked co-mounts (cpu -> cpu,cpuacct) to visit each
		// hierarchy once.
		if e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		dirs = append(dirs, filepath.Join(h.root, e.Name(), path))
	}
	return dirs, nil
}

// PeakMemory reads the highest memory use ever charged to the cgroup at path
// and its descendants.
func (h Hierarchy) PeakMemory(path string) (int64, error) {
	file := filepath.Join(h.root, "memory", path, "memory.max_usage_in_bytes")
	if h.unified {
		file = filepath.Join(h.root, path, "memory.peak")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// OOMKills counts the processes the kernel killed for lack of memory in the
// cgroup at path and its descendants.
func (h Hierarchy) OOMKills(path string) (int64, error) {
	c, err := h.OOMCounter(path)
	if err != nil {
		return 0, err
	}
	return c.Count()
}

// OOMCounter counts the OOM kills of the cgroup at path and of the
// descendants it has now, without walking the tree again on each count (a
// walk of a container's cgroups under v1 costs hundreds of microseconds,
// and a session counts twice a call). Version 2 counts a subtree in its
// root; version 1 counts each cgroup on its own.
func (h Hierarchy) OOMCounter(path string) (OOMCounter, error) {
	if h.unified {
		return OOMCounter{filepath.Join(h.root, path, "memory.events")}, nil
	}
	var files OOMCounter
	err := filepath.WalkDir(filepath.Join(h.root, "memory", path), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			files = append(files, filepath.Join(p, "memory.oom_control"))
		}
		return nil
	})
	return files, err
}

// OOMCounter is the files that count a cgroup tree's OOM kills.
type OOMCounter []string

// Count sums the OOM kills the files count now.
func (c OOMCounter) Count() (int64, error) {
	var total int64
	for _, f := range c {
		n, err := oomKillCount(f)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// oomKillCount reads the oom_kill line of a memory.oom_control (v1) or
// memory.events (v2) file.
func oomKillCount(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no oom_kill count", file)
}

// Remove deletes the cgroup at path and its descendants, in every
// controller, killing first any process still in them: a container whose
// start was cut short can leave its runtime's processes behind. A cgroup
// that the kernel is still tearing down is retried for a short while.
func (h Hierarchy) Remove(path string) error {
	dirs, err := h.controllerDirs(path)
	if err != nil {
		return err
	}
	// The common case first: the OCI runtime removed the container's own
	// cgroup and the parent is empty. rmdir fails on a cgroup with a
	// process or a child in it, so this kills nothing by mistake; it
	// spares a walk of a dozen hierarchies per task.
	left := dirs[:0:0]
	for _, dir := range dirs {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			left = append(left, dir)
		}
	}
	if len(left) == 0 {
		return nil
	}
	h.kill(path)
	var errs []error
	for _, dir := range left {
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveUnused deletes the cgroup at path and its descendants, in every
// controller, if no process is in any of them, and says whether it did. It
// never kills: a cgroup in use belongs to a container that is not the
// caller's to end, such as another engine's on the same parent.
func (h Hierarchy) RemoveUnused(path string) (bool, error) {
	dirs, err := h.controllerDirs(path)
	if err != nil {
		return false, err
	}
	for _, dir := range dirs {
		if populated(dir) {
			return false, nil
		}
	}
	var errs []error
	for _, dir := range dirs {
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return len(errs) == 0, errors.Join(errs...)
}

// populated says whether a process is in the cgroup folder dir or below.
func populated(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// Empty kills every process in the cgroup at path and below, and waits,
// within ctx, until none is left. A runtime's container process whose
// parent was killed mid-start still works on the container's files, and
// the kernel moves a process out of its cgroup only once it has exited.
func (h Hierarchy) Empty(ctx context.Context, path string) error {
	for h.kill(path) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cgroup %s still holds processes after their kill: %w", path, ctx.Err())
		case <-time.After(emptyPoll):
		}
	}
	return nil
}

// emptyPoll is how often Empty looks again: a killed process is gone in
// well under a millisecond unless it is in an uninterruptible sleep.
const emptyPoll = 2 * time.Millisecond

// kill sends SIGKILL to every process in the cgroup at path and below, and
// says how many it found.
func (h Hierarchy) kill(path string) int {
	found := 0
	dir := filepath.Join(h.root, "memory", path)
	if h.unified {
		dir = filepath.Join(h.root, path)
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
				found++
			}
		}
		return nil
	})
	return found
}

// Children lists the names of the cgroups directly below path.
func (h Hierarchy) Children(path string) ([]string, error) {
	dir := filepath.Join(h.root, "memory", path)
	if h.unified {
		dir = filepath.Join(h.root, path)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// removeTree removes a cgroup folder bottom-up. Cgroup folders are removed
// with rmdir even though they list files: the files are the kernel's.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var rmErr error
	for range 50 {
		rmErr = os.Remove(dir)
		if rmErr == nil || errors.Is(rmErr, fs.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rmErr
}
