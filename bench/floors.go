package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/task/run"
)

// bigOutput is what the stdout contender prints: 16 MiB, the most stdout
// a caller may ask for.
const bigOutput = 16 << 20

// stdoutChunk is what each write of the stdout contender prints.
const stdoutChunk = 64 << 10

// floorName is the contender that is the interpreter alone.
const floorName = "python3 in a chroot (no container)"

// chrootedInterpreter is python3 -c 'print(1)' chrooted into the python
// image's root in the direct backend's store, or in a running container's
// root where the store has no image: the interpreter's own floor, no
// container, no backend, no daemon.
func chrootedInterpreter() func(context.Context) error {
	store, err := direct.OpenStore(direct.DefaultImageDir)
	if err == nil {
		if img, err := store.Image("sandboxd/python"); err == nil {
			return chrootRun(filepath.Join(direct.DefaultImageDir, strings.TrimPrefix(img.ID, "sha256:"), "rootfs"))
		}
	}
	return func(context.Context) error { return errors.New("no sandboxd/python in the image store") }
}

// bareInterpreter is python3 -c 'print(1)' chrooted into the root of a
// running sandboxd/python container (pid's): no container, no backend,
// no daemon, the interpreter's own floor in the same image.
func bareInterpreter(pid string) func(context.Context) error {
	return chrootRun("/proc/" + pid + "/root")
}

// chrootRun is python3 -c 'print(1)' chrooted into root.
func chrootRun(root string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "chroot", root, "python3", "-c", "print(1)").Output()
		if err != nil {
			return err
		}
		if string(out) != "1\n" {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
}

// cliRun is `sandboxd run --lang python -c 'print(1)'` against d: the
// command line end to end, its process start and dial included.
func cliRun(d *daemon) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "bin/sandboxd", "run", "--socket", d.socket, "--lang", "python", "-c", "print(1)").Output()
		if err != nil {
			return fmt.Errorf("sandboxd run: %w", err)
		}
		if string(out) != "1\n" {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
}

// stdoutRate is a warm run on d that prints bigOutput bytes, timed from
// the request to the last byte and the result, in MiB/s.
type stdoutRate struct {
	Name       string    `json:"name"`
	SamplesMiB []float64 `json:"samples_mib_per_s"`
	P50MiB     float64   `json:"p50_mib_per_s"`
}

// measureStdout runs the 16 MiB program runs times on each warm contender.
// The program writes one 64 KiB buffer over and over, as a printing loop
// does: a single 16 MiB bytes object would time this VM's page faults
// (its allocation alone takes ~52 ms, in a container and on the host).
func measureStdout(ctx context.Context, cs []*contender, runs int) ([]stdoutRate, error) {
	code := fmt.Sprintf("import sys\nb = b'x' * %d\nfor _ in range(%d):\n    sys.stdout.buffer.write(b)\n", stdoutChunk, bigOutput/stdoutChunk)
	rates := make([]stdoutRate, len(cs))
	samples := make([][]time.Duration, len(cs))
	for round := -1; round < runs; round++ {
		for i, c := range cs {
			// As for latency: every pool full and the host quiet, so that
			// no run is timed in the wake of another daemon's refill.
			if err := settle(ctx, cs); err != nil {
				return nil, err
			}
			var n countOutput
			start := time.Now()
			res, err := c.daemon.client.Run(ctx, run.Request{Program: &run.Program{Language: "python", Code: code},
				Options: run.Options{Network: c.daemon.network, Limits: limits.Limits{StdoutBytes: bigOutput}}}, &n)
			took := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s, 16 MiB of stdout: %w", c.name, err)
			}
			if res.Status != run.StatusOK || n != bigOutput {
				return nil, fmt.Errorf("%s, 16 MiB of stdout: %v, %d bytes", c.name, res.Status, n)
			}
			if round >= 0 {
				samples[i] = append(samples[i], took)
			}
		}
	}
	for i, c := range cs {
		rates[i].Name = c.name
		for _, d := range samples[i] {
			rates[i].SamplesMiB = append(rates[i].SamplesMiB, mibPerS(d))
		}
		rates[i].P50MiB = mibPerS(percentile(samples[i], 50))
	}
	return rates, nil
}

func mibPerS(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bigOutput) / (1 << 20) / d.Seconds()
}

// countOutput counts a run's stdout bytes, each an x.
type countOutput int

func (o *countOutput) Started(run.Started) error { return nil }
func (o *countOutput) Output(s run.Stream, p []byte) error {
	if s == run.Stdout {
		if len(bytes.Trim(p, "x")) != 0 {
			return fmt.Errorf("stdout has other bytes than x")
		}
		*o += countOutput(len(p))
	}
	return nil
}

// floorAt is the chrooted interpreter's throughput at concurrency n.
func floorAt(ts []throughput, n int) (throughput, bool) {
	for _, t := range ts {
		if t.Name == floorName && t.Concurrency == n && t.Errors == 0 && t.Wrong == 0 {
			return t, true
		}
	}
	return throughput{}, false
}

// daemonShare is the daemon's own CPU per task in t, as perf sampled it
// (0 without perf).
func daemonShare(t throughput) float64 {
	for _, c := range t.CPU {
		if c.Class == "daemon" {
			return c.MsPerTask
		}
	}
	return 0
}
