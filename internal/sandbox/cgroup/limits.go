package cgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limits are a running container's memory, CPU and pids limits, as
// sandboxd sets them: memory and swap together, a CPU quota of a period.
type Limits struct {
	MemoryBytes int64
	// MemorySwapBytes limits memory and swap together (v1's memsw); v2
	// limits swap alone, to the difference.
	MemorySwapBytes int64
	CPUQuota        int64
	CPUPeriod       int64
	Pids            int64
}

// SetLimits writes l into the cgroup at path, which the OCI runtime made
// for a container: what `runc update` would write, without starting a
// process to write it. Under v1 the memory limit and the memory and swap
// limit must stay in order at every step, so whichever the new values
// require is written first.
func (h Hierarchy) SetLimits(path string, l Limits) error {
	if h.unified {
		dir := filepath.Join(h.root, path)
		return errors.Join(
			writeValue(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)),
			writeValue(dir, "memory.swap.max", strconv.FormatInt(max(l.MemorySwapBytes-l.MemoryBytes, 0), 10)),
			writeValue(dir, "cpu.max", fmt.Sprintf("%d %d", l.CPUQuota, l.CPUPeriod)),
			writeValue(dir, "pids.max", strconv.FormatInt(l.Pids, 10)),
		)
	}
	memory := filepath.Join(h.root, "memory", path)
	mem := func() error { return writeValue(memory, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)) }
	memsw := func() error {
		err := writeValue(memory, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemorySwapBytes, 10))
		if errors.Is(err, os.ErrNotExist) {
			return nil // no swap accounting in this kernel: no swap to limit
		}
		return err
	}
	// Raising memory past the current memsw limit is refused (EINVAL):
	// then memsw goes first.
	err := mem()
	if errors.Is(err, syscall.EINVAL) {
		err = errors.Join(memsw(), mem())
	} else if err == nil {
		err = memsw()
	}
	cpu := filepath.Join(h.root, "cpu", path)
	return errors.Join(err,
		writeValue(cpu, "cpu.cfs_period_us", strconv.FormatInt(l.CPUPeriod, 10)),
		writeValue(cpu, "cpu.cfs_quota_us", strconv.FormatInt(l.CPUQuota, 10)),
		writeValue(filepath.Join(h.root, "pids", path), "pids.max", strconv.FormatInt(l.Pids, 10)),
	)
}

// writeValue writes one value to a cgroup file, which must exist: the OCI
// runtime made the cgroup.
func writeValue(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

// OOMWatch learns of the OOM kills in a container's cgroup while it
// lives: under v1 each cgroup counts only its own, and the OCI runtime
// removes the container's cgroup when the container exits, its count
// with it; the parent, which stays, counts none of them. v2 counts a
// subtree in its root, and the parent tells after the fact: there the
// watch is idle.
type OOMWatch struct {
	killed atomic.Bool
	events *os.File // the eventfd, read through the runtime's poller
	done   chan struct{}
}

// WatchOOM watches the cgroup at path, which must exist, for OOM kills,
// through the memory controller's eventfd notification (cgroup v1's
// cgroup.event_control, as containerd's shim watches).
func (h Hierarchy) WatchOOM(path string) (*OOMWatch, error) {
	w := &OOMWatch{done: make(chan struct{})}
	if h.unified {
		close(w.done)
		return w, nil
	}
	dir := filepath.Join(h.root, "memory", path)
	counter := filepath.Join(dir, "memory.oom_control")
	control, err := os.Open(counter)
	if err != nil {
		return nil, err
	}
	defer control.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	w.events = os.NewFile(uintptr(efd), "oom events")
	if err := writeValue(dir, "cgroup.event_control", fmt.Sprintf("%d %d", efd, control.Fd())); err != nil {
		w.events.Close()
		return nil, err
	}
	go func() {
		defer close(w.done)
		buf := make([]byte, 8)
		var events uint64
		for {
			// A read returns how many events came since the last one.
			if _, err := w.events.Read(buf); err != nil {
				return // closed
			}
			events += binary.NativeEndian.Uint64(buf)
			_, err := os.Stat(counter)
			if oomSeen(events, err == nil) {
				w.killed.Store(true)
			}
		}
	}()
	return w, nil
}

// oomSeen says whether events read from a v1 OOM eventfd include an OOM:
// the kernel signals once per OOM and once when the cgroup is removed,
// that one only after the cgroup's folder has gone. An event while the
// folder is there is an OOM (its kill may not be counted yet), as
// containerd's shim takes it; once it has gone, any event past the one of
// the removal is. A watcher the scheduler ran only after the OCI runtime
// removed the cgroup took the OOM for the removal and lost it.
func oomSeen(events uint64, cgroupThere bool) bool {
	return events > 0 && cgroupThere || events >= 2
}

// Killed says whether an OOM kill was seen.
func (w *OOMWatch) Killed() bool { return w != nil && w.killed.Load() }

// Close ends the watch.
func (w *OOMWatch) Close() {
	if w == nil || w.events == nil {
		return
	}
	w.events.Close()
	<-w.done
}
