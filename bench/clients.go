package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
)

// pythonHelper and typescriptHelper are the Python and TypeScript clients,
// each in a process of its own kept for the whole measurement: each line
// they read makes one warm print(1), and they answer with the milliseconds
// it took, timed inside the client around its own call, as the Go client's
// run is timed here.
const pythonHelper = `import sys, time
from sandboxd import Client
c = Client(sys.argv[1], retry_within=0)
for _ in sys.stdin:
    t = time.perf_counter()
    r = c.run_code("print(1)")
    ms = (time.perf_counter() - t) * 1000
    print(f"{ms:.4f} {r.start} {r.status.name} {r.text.strip()}", flush=True)
`

const typescriptHelper = `import { createInterface } from "node:readline";
const { Client } = await import(process.argv[3]);
const c = new Client({ addr: process.argv[2], retryWithinMs: 0 });
for await (const _ of createInterface({ input: process.stdin })) {
  const t = performance.now();
  const r = await c.runCode("print(1)");
  const ms = performance.now() - t;
  console.log(ms.toFixed(4) + " " + r.start + " " + r.status + " " + r.text().trim());
}
c.close();
`

// clientOverhead is what the Python and TypeScript clients add to a warm
// print(1) over the Go client on the same socket, and the Python
// package's import time.
type clientOverhead struct {
	Daemon         string    `json:"daemon"`
	Latency        []latency `json:"latency"`
	PythonImportMs float64   `json:"python_import_ms"`
	GRPCImportMs   float64   `json:"grpc_import_ms"`
}

// clientHelper is one of the helper processes.
type clientHelper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(name string, args ...string) (*clientHelper, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &clientHelper{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// run makes one run and returns its time and whether it was warm.
func (h *clientHelper) run() (time.Duration, bool, error) {
	if _, err := io.WriteString(h.in, "run\n"); err != nil {
		return 0, false, err
	}
	if !h.out.Scan() {
		return 0, false, fmt.Errorf("the client exited: %v", h.out.Err())
	}
	f := strings.Fields(h.out.Text())
	if len(f) != 4 || f[2] != "OK" || f[3] != "1" {
		return 0, false, fmt.Errorf("the client answered %q", h.out.Text())
	}
	ms, err := strconv.ParseFloat(f[0], 64)
	return time.Duration(ms * float64(time.Millisecond)), f[1] == "warm", err
}

func (h *clientHelper) stop() {
	h.in.Close()
	if err := h.cmd.Wait(); err != nil {
		h.cmd.Process.Kill()
	}
}

// importMs is the median, over fresh interpreters, of the time an import
// takes, timed inside the interpreter.
func importMs(module string) (float64, error) {
	var samples []time.Duration
	for range 11 {
		cmd := exec.Command(debianPython, "-c", "import time; t = time.perf_counter(); import "+module+"; print((time.perf_counter() - t) * 1000)")
		cmd.Env = append(os.Environ(), "PYTHONPATH=clients/python/src", "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("import %s: %w", module, err)
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			return 0, err
		}
		samples = append(samples, time.Duration(ms*float64(time.Millisecond)))
	}
	return ms(percentile(samples, 50)), nil
}

// debianPython has the Python client's packages (python3-grpcio...).
const debianPython = "/usr/bin/python3"

// measureClients interleaves, run by run, a warm print(1) through the Go,
// Python and TypeScript clients on one daemon's socket, waiting (untimed)
// for its pool before each.
func measureClients(ctx context.Context, c *contender, dir string, runs int) (clientOverhead, error) {
	tsClient, err := filepath.Abs("clients/typescript/dist/index.js")
	if err != nil {
		return clientOverhead{}, err
	}
	if _, err := os.Stat(tsClient); err != nil {
		return clientOverhead{}, fmt.Errorf("the TypeScript client is not built (make bench builds it): %w", err)
	}
	tsHelper := filepath.Join(dir, "client-helper.mjs")
	if err := os.WriteFile(tsHelper, []byte(typescriptHelper), 0o644); err != nil {
		return clientOverhead{}, err
	}
	py, err := startHelper("env", "PYTHONPATH=clients/python/src", debianPython, "-c", pythonHelper, c.daemon.socket)
	if err != nil {
		return clientOverhead{}, err
	}
	defer py.stop()
	ts, err := startHelper("node", tsHelper, c.daemon.socket, "file://"+tsClient)
	if err != nil {
		return clientOverhead{}, err
	}
	defer ts.stop()

	names := []string{"Go client", "Python client", "TypeScript client"}
	samples := make([][]time.Duration, len(names))
	notWarm := make([]int, len(names))
	for round := -3; round < runs; round++ {
		for i := range names {
			if err := c.daemon.poolReady(ctx); err != nil {
				return clientOverhead{}, err
			}
			var took time.Duration
			var warm bool
			switch i {
			case 0:
				start := time.Now()
				var r ran
				r, err = c.daemon.hello(ctx, "", "", run.InterpreterAny)
				took, warm = time.Since(start), r.warm
			case 1:
				took, warm, err = py.run()
			case 2:
				took, warm, err = ts.run()
			}
			if err != nil {
				return clientOverhead{}, fmt.Errorf("%s, run %d: %w", names[i], round, err)
			}
			switch {
			case round < 0:
			case !warm:
				notWarm[i]++
			default:
				samples[i] = append(samples[i], took)
			}
		}
	}
	res := clientOverhead{Daemon: c.name}
	for i, name := range names {
		s := slices.Clone(samples[i])
		l := latency{Name: name, Runtime: c.runtime, P50Ms: ms(percentile(s, 50)), P95Ms: ms(percentile(s, 95)),
			P99Ms: ms(percentile(s, 99)), NotWarm: notWarm[i]}
		for _, d := range samples[i] {
			l.SamplesMs = append(l.SamplesMs, ms(d))
		}
		res.Latency = append(res.Latency, l)
	}
	if res.PythonImportMs, err = importMs("sandboxd"); err != nil {
		return res, err
	}
	res.GRPCImportMs, err = importMs("grpc")
	return res, err
}

func reportClients(w io.Writer, o clientOverhead) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tp50 ms\tp95 ms\tp99 ms\tp50 - Go's\t")
	for _, l := range o.Latency {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%+.2f\t\n", l.Name, l.P50Ms, l.P95Ms, l.P99Ms, l.P50Ms-o.Latency[0].P50Ms)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nimport sandboxd (Python): %.1f ms median of 11 fresh interpreters, of which import grpc alone %.1f ms\n",
		o.PythonImportMs, o.GRPCImportMs)
}

func clientTargets(o clientOverhead) []target {
	var out []target
	if len(o.Latency) == 0 {
		return nil
	}
	for _, l := range o.Latency[1:] {
		d := l.P50Ms - o.Latency[0].P50Ms
		out = append(out, target{What: l.Name + ": a warm print(1) p50 within 2 ms of the Go client's",
			Result: fmt.Sprintf("%.1f ms vs %.1f ms: %+.2f ms", l.P50Ms, o.Latency[0].P50Ms, d), Met: d <= 2})
	}
	return out
}
