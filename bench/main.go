// Command bench holds sandboxd against plain Docker on this machine, all
// measured side by side in one run:
//
//   - latency of print(1), each run in a fresh sandbox: sandboxd warm
//     (pooled container) and cold, on each backend, against `docker run
//     --rm` and `docker exec` into a running container (the floor of an
//     engine round-trip), for runc, crun and runsc, interleaved run by run;
//   - latency of a program that prints 1 in each language, warm, on
//     docker/runc;
//   - throughput of sandboxd on runc and crun at concurrency 1 to 16,
//     against sequential `docker run --rm`, with the host's CPU per task;
//   - the daemon's resident memory idle, under load, and after it;
//   - the clients: a warm print(1) through the Python and TypeScript
//     clients against the Go client on the same socket, and the Python
//     package's import time;
//   - sessions: CreateSession against a warm single-use run, a 1+1 call
//     in a live Python session, an idle session's memory, and 20 live
//     sessions answering at once.
//
// The daemons are real `sandboxd serve` processes (bin/sandboxd, built by
// make bench). It prints tables, checks the targets, and writes everything
// to a JSON file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task/run"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func main() {
	runs := flag.Int("runs", 200, "sequential runs of each contender for latency")
	duration := flag.Duration("duration", 30*time.Second, "how long each throughput level runs")
	out := flag.String("json", "bench/results/latest.json", "where to write the results")
	onlySessions := flag.Bool("sessions-only", false, "measure the sessions only")
	onlyClients := flag.Bool("clients-only", false, "measure the Python and TypeScript clients against the Go client only")
	onlyTools := flag.Bool("tools-only", false, "measure the round trip of a program's tool call only")
	flag.Parse()
	if err := measure(*runs, *duration, *out, *onlySessions, *onlyClients, *onlyTools); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// results is what the JSON file holds.
type results struct {
	When       time.Time        `json:"when"`
	Host       string           `json:"host"`
	Latency    []latency        `json:"latency"`
	Languages  []latency        `json:"languages"`
	Throughput []throughput     `json:"throughput"`
	Memory     memory           `json:"memory"`
	Sessions   []sessionLatency `json:"sessions"`
	Live       liveSessions     `json:"live_sessions"`
	Clients    clientOverhead   `json:"clients"`
	ToolCalls  []toolLatency    `json:"tool_calls"`
	Targets    []target         `json:"targets"`
}

type latency struct {
	Name      string    `json:"name"`
	Runtime   string    `json:"runtime"`
	SamplesMs []float64 `json:"samples_ms"`
	P50Ms     float64   `json:"p50_ms"`
	P95Ms     float64   `json:"p95_ms"`
	P99Ms     float64   `json:"p99_ms"`
	// NotWarm counts runs of a warm contender that found no pooled
	// container; they are not in the samples.
	NotWarm int `json:"not_warm,omitempty"`
}

type throughput struct {
	Name        string  `json:"name"`
	Concurrency int     `json:"concurrency"`
	Tasks       int     `json:"tasks"`
	Errors      int     `json:"errors"`
	Wrong       int     `json:"wrong_output"`
	PerSecond   float64 `json:"tasks_per_second"`
	// CPUMsPerTask is the host's busy CPU time over the level, per task:
	// engine, shims, OCI runtime, init, daemon and program together.
	CPUMsPerTask float64 `json:"cpu_ms_per_task"`
}

// ociRuntimes are the OCI runtimes the bench holds side by side.
var ociRuntimes = []string{"runc", "crun", "runsc"}

type memory struct {
	Daemon     string  `json:"daemon"`
	IdleMiB    float64 `json:"idle_mib"`
	PeakMiB    float64 `json:"under_load_peak_mib"`
	AfterMiB   float64 `json:"after_load_mib"`
	AfterWaitS float64 `json:"after_load_wait_s"`
}

type target struct {
	What   string `json:"what"`
	Result string `json:"result"`
	Met    bool   `json:"met"`
}

func measure(runs int, duration time.Duration, out string, onlySessions, onlyClients, onlyTools bool) error {
	ctx, stop := signalContext()
	defer stop()
	dir, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// One daemon per backend, runtime and pool setting.
	var daemons []*daemon
	defer func() {
		for _, d := range daemons {
			d.stop()
		}
	}()
	start := func(name, backend, rt string, pool int, allowList bool) (*daemon, error) {
		d, err := startDaemon(ctx, dir, name, backend, rt, pool, allowList)
		if err == nil {
			daemons = append(daemons, d)
		}
		return d, err
	}
	type setup struct {
		name, backend, runtime string
		pool                   int
	}
	var contenders []*contender
	for _, s := range []setup{
		{"docker/runc warm", "docker", "runc", 2}, {"docker/runc cold", "docker", "runc", 0},
		{"containerd/runc warm", "containerd", "runc", 2}, {"containerd/runc cold", "containerd", "runc", 0},
		{"docker/crun warm", "docker", "crun", 2}, {"docker/crun cold", "docker", "crun", 0},
		{"containerd/crun warm", "containerd", "crun", 2}, {"containerd/crun cold", "containerd", "crun", 0},
		{"docker/runsc warm", "docker", "runsc", 2}, {"docker/runsc cold", "docker", "runsc", 0},
		{"containerd/runsc warm", "containerd", "runsc", 2}, {"containerd/runsc cold", "containerd", "runsc", 0},
		// Allow-listed tasks: linked to the egress gateway, from its pool.
		{"docker/runc allowlist", "docker", "runc", 2}, {"containerd/runc allowlist", "containerd", "runc", 2},
	} {
		d, err := start(strings.NewReplacer("/", "-", " ", "-").Replace(s.name), s.backend, s.runtime, s.pool, strings.HasSuffix(s.name, " allowlist"))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		contenders = append(contenders, &contender{name: "sandboxd " + s.name, runtime: s.runtime, warm: s.pool > 0, daemon: d})
	}
	for _, rt := range ociRuntimes {
		contenders = append(contenders, &contender{name: "docker run --rm", runtime: rt, run: dockerRun(rt)})
		execRun, cleanup, err := dockerExec(ctx, rt)
		if err != nil {
			return err
		}
		defer cleanup()
		contenders = append(contenders, &contender{name: "docker exec", runtime: rt, run: execRun})
	}

	res := results{When: time.Now().UTC()}
	res.Host, _ = os.Hostname()
	var warm []*contender
	for _, c := range contenders {
		if c.daemon != nil && c.warm && c.daemon.network.Mode == "" {
			warm = append(warm, c)
		}
	}
	fmt.Printf("tool calls: %d runs per warm daemon, each timing %d calls of a tool the bench answers at once (after %d untimed), in the sandbox\n\n", toolRuns, toolCalls, toolWarmup)
	if res.ToolCalls, err = measureToolCalls(ctx, warm); err != nil {
		return err
	}
	reportToolCalls(os.Stdout, res.ToolCalls)
	if onlyTools {
		res.Targets = toolTargets(res.ToolCalls)
		return writeResults(res, out)
	}

	fmt.Printf("\nclients: a warm print(1) on %s through the Go, Python and TypeScript clients, %d runs each, interleaved\n\n", warm[0].name, runs)
	if res.Clients, err = measureClients(ctx, warm[0], dir, runs); err != nil {
		return err
	}
	reportClients(os.Stdout, res.Clients)
	if onlyClients {
		res.Targets = append(clientTargets(res.Clients), toolTargets(res.ToolCalls)...)
		return writeResults(res, out)
	}

	fmt.Printf("\nsessions: %d rounds per warm daemon, interleaved: a warm run, CreateSession, %d calls of 1+1 (after an untimed first)\n\n", sessionRounds, sessionCalls)
	if res.Sessions, err = measureSessions(ctx, warm); err != nil {
		return err
	}
	if res.Live, err = holdSessions(ctx, warm[0].daemon, warm[0].name, 20); err != nil {
		return err
	}
	reportSessions(os.Stdout, res.Sessions, res.Live)
	if onlySessions {
		res.Targets = append(append(sessionTargets(res.Sessions, res.Live), clientTargets(res.Clients)...), toolTargets(res.ToolCalls)...)
		return writeResults(res, out)
	}

	fmt.Printf("\nlatency of print(1), %d sequential runs each, interleaved (warm: the pool is waited for, untimed, before each run)\n\n", runs)
	if err := measureLatency(ctx, contenders, runs); err != nil {
		return err
	}
	res.Latency = reportLatency(os.Stdout, contenders)

	langRuns := max(runs/4, 10)
	fmt.Printf("\nlatency of a program that prints 1, per language, on %s, %d sequential runs each, interleaved\n\n", contenders[0].name, langRuns)
	langs, err := languageContenders(ctx, contenders[0])
	if err != nil {
		return err
	}
	if err := measureLatency(ctx, langs, langRuns); err != nil {
		return err
	}
	res.Languages = reportLatency(os.Stdout, langs)

	fmt.Printf("\nthroughput of print(1), %v per level\n\n", duration)
	seq, err := sequentialDocker(ctx, duration)
	if err != nil {
		return err
	}
	res.Throughput = append(res.Throughput, seq)
	memDaemon := contenders[0].daemon
	res.Memory.Daemon = contenders[0].name
	time.Sleep(5 * time.Second)
	res.Memory.IdleMiB = memDaemon.rssMiB()
	var peak float64
	sampling := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-tick.C:
				peak = max(peak, memDaemon.rssMiB())
			}
		}
	}()
	for _, c := range contenders {
		// runc against crun on each backend: where a task's CPU goes
		// changes with the OCI runtime, and the CPU is what caps it.
		if !c.warm || c.daemon == nil || c.daemon.network.Mode != "" || c.runtime == "runsc" {
			continue
		}
		for _, n := range []int{1, 2, 4, 8, 16} {
			tp := measureThroughput(ctx, c.daemon, c.name, n, duration)
			res.Throughput = append(res.Throughput, tp)
		}
	}
	close(sampling)
	res.Memory.PeakMiB = peak
	// The daemon gives memory back to the system when it goes idle.
	wait := 15 * time.Second
	time.Sleep(wait)
	res.Memory.AfterMiB, res.Memory.AfterWaitS = memDaemon.rssMiB(), wait.Seconds()
	reportThroughput(os.Stdout, res.Throughput)
	fmt.Printf("\ndaemon RSS (%s): idle %.1f MiB, under load up to %.1f MiB, %.0f s after the load %.1f MiB\n",
		res.Memory.Daemon, res.Memory.IdleMiB, res.Memory.PeakMiB, res.Memory.AfterWaitS, res.Memory.AfterMiB)

	res.Targets = append(append(append(checkTargets(res), sessionTargets(res.Sessions, res.Live)...), clientTargets(res.Clients)...), toolTargets(res.ToolCalls)...)
	return writeResults(res, out)
}

// writeResults prints the targets and writes everything to out.
func writeResults(res results, out string) error {
	fmt.Printf("\ntargets\n")
	for _, t := range res.Targets {
		mark := "MET  "
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Printf("  %s  %s: %s\n", mark, t.What, t.Result)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nresults written to %s\n", out)
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// contender is one way of running print(1).
type contender struct {
	name    string
	runtime string
	warm    bool
	daemon  *daemon
	// language runs on daemon, its program hello[language]; python's
	// print(1) when empty. code, when set, is the program instead, run in
	// the interpreter interp asks for.
	language string
	code     string
	interp   run.Interpreter
	run      func(context.Context) error
	samples  []time.Duration
	notWarm  int
}

func measureLatency(ctx context.Context, cs []*contender, runs int) error {
	for round := -3; round < runs; round++ {
		for _, c := range cs {
			if c.daemon != nil && c.warm {
				if err := c.daemon.poolReady(ctx); err != nil {
					return err
				}
			}
			start := time.Now()
			var warm bool
			var err error
			if c.daemon != nil {
				warm, err = c.daemon.hello(ctx, c.language, c.code, c.interp)
			} else {
				err = c.run(ctx)
			}
			took := time.Since(start)
			if err != nil {
				return fmt.Errorf("%s %s, run %d: %w", c.name, c.runtime, round, err)
			}
			switch {
			case round < 0: // warm-up
			case c.warm && !warm:
				c.notWarm++
			default:
				c.samples = append(c.samples, took)
			}
		}
	}
	return nil
}

func reportLatency(w io.Writer, cs []*contender) []latency {
	base := map[string]time.Duration{}
	for _, c := range cs {
		if c.name == "docker run --rm" {
			base[c.runtime] = percentile(c.samples, 50)
		}
	}
	var out []latency
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "runtime\tcontender\tp50\tp95\tp99\tp50 vs docker run --rm\t\n")
	for _, rt := range ociRuntimes {
		for _, c := range cs {
			if c.runtime != rt {
				continue
			}
			l := latency{Name: c.name, Runtime: rt, NotWarm: c.notWarm,
				P50Ms: ms(percentile(c.samples, 50)), P95Ms: ms(percentile(c.samples, 95)), P99Ms: ms(percentile(c.samples, 99))}
			for _, d := range c.samples {
				l.SamplesMs = append(l.SamplesMs, ms(d))
			}
			out = append(out, l)
			note := ""
			if c.notWarm > 0 {
				note = fmt.Sprintf(" (%d runs found no pooled container)", c.notWarm)
			}
			ratio := "-"
			if b := base[rt]; b > 0 {
				ratio = fmt.Sprintf("%.2fx", float64(percentile(c.samples, 50))/float64(b))
			}
			fmt.Fprintf(tw, "%s\t%s%s\t%.1f ms\t%.1f ms\t%.1f ms\t%s\t\n", rt, c.name, note, l.P50Ms, l.P95Ms, l.P99Ms, ratio)
		}
	}
	tw.Flush()
	return out
}

// measureThroughput runs print(1) from n callers for d and counts.
func measureThroughput(ctx context.Context, dm *daemon, name string, n int, d time.Duration) throughput {
	busy := hostBusy()
	var tasks, errs, wrong atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				_, err := dm.hello(ctx, "", "", run.InterpreterAny)
				switch {
				case errors.Is(err, errWrongOutput):
					wrong.Add(1)
				case err != nil:
					errs.Add(1)
				default:
					tasks.Add(1)
				}
			}
		})
	}
	started := time.Now()
	wg.Wait()
	elapsed := time.Since(started)
	t := throughput{Name: name, Concurrency: n, Tasks: int(tasks.Load()), Errors: int(errs.Load()),
		Wrong: int(wrong.Load()), PerSecond: float64(tasks.Load()) / elapsed.Seconds()}
	if t.Tasks > 0 {
		t.CPUMsPerTask = ms(hostBusy()-busy) / float64(t.Tasks)
	}
	return t
}

// hostBusy is the CPU time the host has spent not idle since it booted,
// from /proc/stat: user, nice, system, irq, softirq and steal.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		// idle and iowait (the 4th and 5th) are not work; guest time is
		// already in user.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	// USER_HZ is 100 on Linux's every architecture the daemon builds for.
	return time.Duration(ticks) * 10 * time.Millisecond
}

// sequentialDocker is the throughput of docker run --rm, one at a time.
func sequentialDocker(ctx context.Context, d time.Duration) (throughput, error) {
	rn := dockerRun("runc")
	n := 0
	busy, start := hostBusy(), time.Now()
	for time.Since(start) < d {
		if err := rn(ctx); err != nil {
			return throughput{}, err
		}
		n++
	}
	return throughput{Name: "docker run --rm (sequential)", Concurrency: 1, Tasks: n, PerSecond: float64(n) / time.Since(start).Seconds(),
		CPUMsPerTask: ms(hostBusy()-busy) / float64(max(n, 1))}, nil
}

func reportThroughput(w io.Writer, ts []throughput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tconcurrency\ttasks/s\ttasks\terrors\twrong output\tvs sequential docker run --rm\thost CPU per task\t\n")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%d\t%d\t%.1fx\t%.0f ms\t\n", t.Name, t.Concurrency, t.PerSecond, t.Tasks, t.Errors, t.Wrong, t.PerSecond/ts[0].PerSecond, t.CPUMsPerTask)
	}
	tw.Flush()
}

func checkTargets(res results) []target {
	find := func(name, rt string) latency {
		for _, l := range res.Latency {
			if l.Name == name && l.Runtime == rt {
				return l
			}
		}
		return latency{}
	}
	var out []target
	for _, c := range []struct {
		runtime, warm string
		ratio         float64
	}{{"runc", "sandboxd docker/runc warm", 0.25}, {"runc", "sandboxd containerd/runc warm", 0.25},
		{"runsc", "sandboxd docker/runsc warm", 0.35}, {"runsc", "sandboxd containerd/runsc warm", 0.35}} {
		w, base := find(c.warm, c.runtime), find("docker run --rm", c.runtime)
		r := w.P50Ms / base.P50Ms
		out = append(out, target{What: fmt.Sprintf("%s p50 <= %.2f x docker run --rm (%s)", c.warm, c.ratio, c.runtime),
			Result: fmt.Sprintf("%.1f ms vs %.1f ms: %.2fx", w.P50Ms, base.P50Ms, r), Met: r <= c.ratio})
		out = append(out, target{What: c.warm + " p99 <= 2 x p50",
			Result: fmt.Sprintf("p99 %.1f ms, p50 %.1f ms: %.2fx", w.P99Ms, w.P50Ms, w.P99Ms/w.P50Ms), Met: w.P99Ms <= 2*w.P50Ms})
	}
	for _, backend := range []string{"docker", "containerd"} {
		none, list := find("sandboxd "+backend+"/runc warm", "runc"), find("sandboxd "+backend+"/runc allowlist", "runc")
		r := list.P50Ms / none.P50Ms
		out = append(out, target{What: fmt.Sprintf("sandboxd %s/runc warm: allow-listed p50 <= 1.5 x no network", backend),
			Result: fmt.Sprintf("%.1f ms vs %.1f ms: %.2fx", list.P50Ms, none.P50Ms, r), Met: r <= 1.5})
	}
	seq := res.Throughput[0].PerSecond
	for _, t := range res.Throughput {
		if t.Concurrency == 8 {
			out = append(out, target{What: t.Name + " at concurrency 8: no errors, right output, >= 3 x sequential docker run --rm",
				Result: fmt.Sprintf("%.1f tasks/s (%.1fx), %d errors, %d wrong", t.PerSecond, t.PerSecond/seq, t.Errors, t.Wrong),
				Met:    t.Errors == 0 && t.Wrong == 0 && t.PerSecond >= 3*seq})
		}
	}
	m := res.Memory
	out = append(out, target{What: "daemon RSS idle <= 40 MiB", Result: fmt.Sprintf("%.1f MiB", m.IdleMiB), Met: m.IdleMiB <= 40})
	out = append(out, target{What: "daemon RSS back within 10% of idle after the load",
		Result: fmt.Sprintf("%.1f MiB after, %.1f MiB idle", m.AfterMiB, m.IdleMiB), Met: m.AfterMiB <= 1.1*m.IdleMiB})
	return out
}

// daemon is a `sandboxd serve` process of the bench's own.
type daemon struct {
	cmd    *exec.Cmd
	socket string
	client *server.Client
	pool   int
	// network is what each run asks for.
	network netpolicy.Request
}

// benchSubnets gives each allow-listing daemon an egress subnet of its own.
var benchSubnets int

func startDaemon(ctx context.Context, dir, name, backend, rt string, pool int, allowList bool) (*daemon, error) {
	state := filepath.Join(dir, name)
	socket := filepath.Join(state, "sandboxd.sock")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command("bin/sandboxd", "serve", "--socket", socket, "--state-dir", state,
		"--artifacts-dir", filepath.Join(state, "artifacts"), "--instance", "bench-"+name,
		"--backend", backend, "--default-runtime", rt,
		"--pool-size", strconv.Itoa(pool), "--log-level", "warn", "--max-sessions", "24")
	d := &daemon{cmd: cmd, socket: socket, pool: pool}
	if allowList {
		// A policy the program never uses: what is measured is the link,
		// the binding and the proxy settings, not a connection.
		benchSubnets++
		cmd.Args = append(cmd.Args, "--egress-policy", "bench=pypi.internal:443", "--egress-pool-size", strconv.Itoa(pool),
			"--egress-subnet", fmt.Sprintf("100.90.%d.0/24", benchSubnets), "--egress-run-dir", filepath.Join(state, "egress"))
		d.network = netpolicy.Request{Mode: netpolicy.AllowList, Policy: "bench"}
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	client, err := server.Dial(server.DialOptions{Socket: socket})
	if err != nil {
		d.stop()
		return nil, err
	}
	d.client = client
	deadline := time.Now().Add(time.Minute)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		healthy := client.Healthy(hctx)
		cancel()
		if healthy {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the daemon %s did not come up", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// poolReady waits until the daemon's pool is full.
func (d *daemon) poolReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		inv, err := d.client.Inventory(ctx)
		if err != nil {
			return err
		}
		full := len(inv.Pools) > 0
		for _, p := range inv.Pools {
			full = full && p.Ready >= p.Size
		}
		if full {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the pool did not refill")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var errWrongOutput = errors.New("wrong output")

// hello runs the program of language (python's when empty) that prints
// 1, or code, in the interpreter interp asks for, and says whether it was
// warm.
func (d *daemon) hello(ctx context.Context, language, code string, interp run.Interpreter) (bool, error) {
	if language == "" {
		language = "python"
	}
	if code == "" {
		code = hello[language]
	}
	var out stdout
	res, err := d.client.Run(ctx, run.Request{Program: &run.Program{Language: language, Code: code}, Options: run.Options{Network: d.network, Interpreter: interp}}, &out)
	if err != nil {
		return false, err
	}
	if res.Status != run.StatusOK || string(out) != "1\n" || res.BundleError != "" {
		return false, fmt.Errorf("%w: %v %q %s", errWrongOutput, res.Status, out, res.BundleError)
	}
	return res.Start == run.StartWarm, nil
}

// stdout keeps a run's stdout.
type stdout []byte

func (o *stdout) Started(run.Started) error { return nil }
func (o *stdout) Output(s run.Stream, p []byte) error {
	if s == run.Stdout {
		*o = append(*o, p...)
	}
	return nil
}

// rssMiB is the daemon's resident memory.
func (d *daemon) rssMiB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func (d *daemon) stop() {
	if d.client != nil {
		d.client.Close()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
}

func dockerRun(rt string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--runtime", rt, "sandboxd/python", "python3", "-c", "print(1)").Output()
		if err != nil {
			return err
		}
		if string(out) != "1\n" {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
}

// dockerExec runs print(1) in one long-running container: no container is
// made per run, so it is the floor of a round-trip through the engine.
func dockerExec(ctx context.Context, rt string) (func(context.Context) error, func(), error) {
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--runtime", rt, "--network", "none", "--label", "io.sandboxd.bench=exec",
		"sandboxd/python", "sleep", "infinity").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("start the docker exec container: %w", err)
	}
	id := strings.TrimSpace(string(out))
	rn := func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "docker", "exec", id, "python3", "-c", "print(1)").Output()
		if err != nil {
			return err
		}
		if string(out) != "1\n" {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
	return rn, func() { exec.Command("docker", "rm", "-f", id).Run() }, nil
}

func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
