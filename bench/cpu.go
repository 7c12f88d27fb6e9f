package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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
// (the kernel's comm, 15 bytes at most).
func cpuClass(comm string) string {
	switch {
	case comm == "swapper" || strings.HasPrefix(comm, "swapper/"):
		return "" // idle
	case comm == "dockerd":
		return "dockerd"
	case comm == "containerd":
		return "containerd"
	case strings.HasPrefix(comm, "containerd-shim"):
		return "shim"
	case comm == "runc" || strings.HasPrefix(comm, "runc:") || comm == "crun" || strings.HasPrefix(comm, "memfd:") ||
		strings.HasPrefix(comm, "runsc") || comm == "exe":
		// runc re-executes itself from a sealed memfd; runsc as exe.
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
var cpuClasses = []string{"dockerd", "containerd", "shim", "OCI runtime", "init", "program", "daemon", "kernel threads", "bench (the caller)", "perf (the sampling)", "other"}

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
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", s.file, "-F", "comm,period").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	return cpuShares(out, tasks), nil
}

// cpuShares sums perf script's "comm period" lines by class.
func cpuShares(script []byte, tasks int) []cpuShare {
	ns := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(script))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		period, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		if class := cpuClass(strings.TrimSpace(line[:i])); class != "" {
			ns[class] += period
		}
	}
	var out []cpuShare
	for _, c := range cpuClasses {
		if ns[c] > 0 && tasks > 0 {
			out = append(out, cpuShare{Class: c, MsPerTask: ns[c] / 1e6 / float64(tasks)})
		}
	}
	return out
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
