package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// A task's CPU is spread over processes that come and go faster than
// /proc can be read (runc lives for milliseconds, a shim for a task), so
// it is sampled: perf's cpu-clock on every CPU, each sample the process
// then running and the nanoseconds it stands for.

// cpuShare is one class of process's CPU over a throughput level.
type cpuShare struct {
	Class     string  `json:"class"`
	MsPerTask float64 `json:"ms_per_task"`
}

// cpuClass names what a process is for a task, from its command name
// (the kernel's comm, 15 bytes at most) and, for a process that re-executed
// itself as exe, the binary it runs (bin, "" when perf saw none).
func cpuClass(comm, bin string) string {
	switch {
	case comm == "swapper" || strings.HasPrefix(comm, "swapper/"):
		return "" // idle
	case comm == "dockerd" || comm == "exe" && bin == "dockerd":
		// dockerd re-executes itself as exe for its network hook.
		return "dockerd"
	case comm == "containerd":
		return "containerd"
	case strings.HasPrefix(comm, "containerd-shim"):
		return "shim"
	case comm == "exe" && (bin == "runsc" || bin == ""):
		// runsc re-executes itself as its sentry and gofer, whose stubs
		// run the program: all are exe to the host. Stubs that were
		// there before perf began show no binary; every other exe was
		// seen to exec.
		return "gVisor sandbox"
	case comm == "runc" || strings.HasPrefix(comm, "runc:") || comm == "crun" || strings.HasPrefix(comm, "memfd:") ||
		comm == "runsc" || comm == "exe" || comm != "" && strings.Trim(comm, "0123456789") == "":
		// runc re-executes itself from a sealed memfd, and as exe; the
		// direct backend runs runc and crun from its own sealed copies,
		// /proc/self/fd/N, which the kernel names N.
		return "OCI runtime"
	case comm == "init":
		return "init"
	case comm == "python3" || comm == "node":
		return "program"
	case comm == "sandboxd":
		return "daemon"
	case comm == "bench":
		return "bench (the caller)"
	case comm == "perf":
		return "perf (the sampling)"
	case strings.HasPrefix(comm, "kworker") || strings.HasPrefix(comm, "ksoftirqd") || strings.HasPrefix(comm, "rcu") ||
		strings.HasPrefix(comm, "kswapd") || strings.HasPrefix(comm, "migration"):
		return "kernel threads"
	}
	return "other"
}

// cpuClasses is the order the classes are reported in.
var cpuClasses = []string{"dockerd", "containerd", "shim", "OCI runtime", "gVisor sandbox", "init", "program", "daemon", "kernel threads", "bench (the caller)", "perf (the sampling)", "other"}

// cpuMeter measures the host's CPU over a level: /proc/stat's busy time,
// and by process when perf is at hand.
type cpuMeter struct {
	busy time.Duration
	perf *sampling
}

func meterCPU(dir string) (*cpuMeter, error) {
	perf, err := sampleCPU(dir)
	if err != nil {
		return nil, err
	}
	return &cpuMeter{busy: hostBusy(), perf: perf}, nil
}

// read ends the measurement and puts it on t, per task.
func (m *cpuMeter) read(ctx context.Context, t *throughput) error {
	if t.Tasks > 0 {
		t.CPUMsPerTask = ms(hostBusy()-m.busy) / float64(t.Tasks)
	}
	if m.perf == nil {
		return nil
	}
	var err error
	t.CPU, err = m.perf.stop(ctx, t.Tasks)
	return err
}

// sampling is perf recording every CPU until stopped.
type sampling struct {
	cmd  *exec.Cmd
	file string
}

// sampleCPU starts perf, or says why it cannot (no perf on the host is
// not an error: the breakdown is left out).
func sampleCPU(dir string) (*sampling, error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, nil
	}
	f, err := os.CreateTemp(dir, "perf-*.data")
	if err != nil {
		return nil, err
	}
	f.Close()
	// 499 Hz: a sample every ~2 ms per CPU, thousands per level, and
	// off any timer the load itself runs on.
	cmd := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-a", "-F", "499", "-o", f.Name())
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &sampling{cmd: cmd, file: f.Name()}, nil
}

// stop ends the recording and gives each class's CPU per task.
func (s *sampling) stop(ctx context.Context, tasks int) ([]cpuShare, error) {
	s.cmd.Process.Signal(syscall.SIGINT)
	s.cmd.Wait()
	defer os.Remove(s.file)
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", s.file, "-F", "comm,pid,period", "--show-mmap-events", "--show-task-events").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	return cpuShares(out, tasks), nil
}

// cpuShares sums perf script's samples ("comm pid period") by class. The
// mmap and task events between them say which binary each process runs:
// the first executable file it maps after an exec, inherited across a
// fork.
func cpuShares(script []byte, tasks int) []cpuShare {
	ns := map[string]float64{}
	bins := map[string]string{}
	// Samples of an exe that is still loading wait for its binary.
	held := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if ev := strings.Index(line, " PERF_RECORD_"); ev >= 0 {
			if pid := processEvent(bins, line[ev+1:]); held[pid] > 0 {
				ns[cpuClass("exe", bins[pid])] += held[pid]
				delete(held, pid)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		period, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		pid, comm := f[len(f)-2], strings.Join(f[:len(f)-2], " ")
		if comm == "exe" && bins[pid] == execed {
			held[pid] += period
		} else if class := cpuClass(comm, bins[pid]); class != "" {
			ns[class] += period
		}
	}
	for _, period := range held {
		ns[cpuClass("exe", execed)] += period
	}
	var out []cpuShare
	for _, c := range cpuClasses {
		if ns[c] > 0 && tasks > 0 {
			out = append(out, cpuShare{Class: c, MsPerTask: ns[c] / 1e6 / float64(tasks)})
		}
	}
	return out
}

// execed is a process's binary from its exec to its first executable
// mapping, while the kernel loads it.
const execed = "(exec)"

// processEvent follows what one of perf's events says of a process's
// binary: a fork hands the parent's to the child, and after an exec the
// first executable file mapped is it. It returns the process whose binary
// an exec's mapping named, or "".
func processEvent(bins map[string]string, ev string) string {
	switch {
	case strings.HasPrefix(ev, "PERF_RECORD_COMM exec: "):
		// "PERF_RECORD_COMM exec: exe:25728/25728"
		pid, _, _ := strings.Cut(ev[strings.LastIndexByte(ev, ':')+1:], "/")
		bins[pid] = execed
	case strings.HasPrefix(ev, "PERF_RECORD_FORK("):
		// "PERF_RECORD_FORK(child:tid):(parent:ptid)"
		var child, parent string
		if c, p, ok := strings.Cut(strings.TrimPrefix(ev, "PERF_RECORD_FORK("), "):("); ok {
			child, _, _ = strings.Cut(c, ":")
			parent, _, _ = strings.Cut(p, ":")
		}
		if b, ok := bins[parent]; ok && child != parent {
			bins[child] = b
		}
	case strings.HasPrefix(ev, "PERF_RECORD_MMAP"):
		// "PERF_RECORD_MMAP2 25811/25811: [...]: r-xp /usr/local/lib/sandboxd/runsc"
		rest := ev[strings.IndexByte(ev, ' ')+1:]
		pid, _, _ := strings.Cut(rest, "/")
		i := strings.LastIndex(rest, "]: ")
		if i < 0 {
			return ""
		}
		perms, path, ok := strings.Cut(rest[i+3:], " ")
		if b, seen := bins[pid]; seen && b != execed || !ok || !strings.Contains(perms, "x") || !strings.HasPrefix(path, "/") || strings.Contains(path, ".so") {
			return ""
		}
		bins[pid] = filepath.Base(strings.TrimSuffix(path, " (deleted)"))
		return pid
	}
	return ""
}

// reportCPU prints each level's CPU per task by class, one column a
// class.
func reportCPU(w io.Writer, ts []throughput) {
	var classes []string
	for _, c := range cpuClasses {
		for _, t := range ts {
			if slices.ContainsFunc(t.CPU, func(s cpuShare) bool { return s.Class == c }) && !slices.Contains(classes, c) {
				classes = append(classes, c)
			}
		}
	}
	if len(classes) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tconcurrency\t%s\tsampled\t\n", strings.Join(classes, "\t"))
	for _, t := range ts {
		if len(t.CPU) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t", t.Name, t.Concurrency)
		var sum float64
		for _, c := range classes {
			var v float64
			for _, s := range t.CPU {
				if s.Class == c {
					v = s.MsPerTask
				}
			}
			sum += v
			fmt.Fprintf(tw, "%.1f\t", v)
		}
		fmt.Fprintf(tw, "%.1f\t\n", sum)
	}
	tw.Flush()
}
