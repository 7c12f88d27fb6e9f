// Command bench holds sandboxd against plain Docker on this machine, all
// measured side by side in one run:
//
//   - latency of print(1), each run in a fresh sandbox: sandboxd warm
//     (pooled container) and cold, on each backend, against `docker run
//     --rm` and `docker exec` into a running container (the floor of an
//     round-trip through Docker), for runc, crun and runsc, interleaved run by run;
//   - latency of a program that prints 1 in each language, warm, on
//     docker/runc;
//   - throughput of sandboxd on runc, crun and runsc at concurrency 1 to 16,
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
	"cmp"
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
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task/run"
	"google.golang.org/grpc/experimental"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func main() {
	// The Go client's buffers, as the daemon's and the CLI's.
	experimental.SetDefaultBufferPool(server.BufferPool())
	runs := flag.Int("runs", 200, "sequential runs of each contender for latency")
	duration := flag.Duration("duration", 30*time.Second, "how long each throughput level runs")
	out := flag.String("json", "bench/results/latest.json", "where to write the results")
	onlySessions := flag.Bool("sessions-only", false, "measure the sessions only")
	onlyClients := flag.Bool("clients-only", false, "measure the Python and TypeScript clients against the Go client only")
	onlyTools := flag.Bool("tools-only", false, "measure the round trip of a program's tool call only")
	onlyThroughput := flag.Bool("throughput-only", false, "measure throughput and where each task's CPU goes only")
	onlyLatency := flag.Bool("latency-only", false, "measure the latency of print(1) only")
	onlyStdout := flag.Bool("stdout-only", false, "measure 16 MiB of stdout end to end only")
	onlyJudge := flag.Bool("judge-only", false, "measure the judge workload only (docs/judge.md)")
	onlyWorkstation := flag.Bool("processes-only", false, "measure terminals, the inbound proxy and background processes only (docs/processes.md)")
	pairs := flag.String("pairs", "", "measure only these backend/runtime pairs, comma-separated (e.g. containerd/crun,docker/runc)")
	redraw := flag.String("chart-from", "", "measure nothing: draw the chart of this results file, next to it (.svg)")
	flag.Parse()
	if *redraw != "" {
		if err := chartFrom(*redraw); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := measure(*runs, *duration, *out, only{*onlySessions, *onlyClients, *onlyTools, *onlyThroughput, *onlyLatency, *onlyStdout, *onlyJudge, *onlyWorkstation, *pairs}); err != nil {
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
	Stdout     []stdoutRate     `json:"stdout_16mib"`
	Throughput []throughput     `json:"throughput"`
	Memory     memory           `json:"memory"`
	Sessions   []sessionLatency `json:"sessions"`
	Live       liveSessions     `json:"live_sessions"`
	Clients    clientOverhead   `json:"clients"`
	ToolCalls  []toolLatency    `json:"tool_calls"`
	Judge      []judgeRate      `json:"judge"`
	// Workstation is the terminals, inbound proxy and background
	// processes of sessions, on the direct backend.
	Workstation []workstation `json:"workstation"`
	Targets     []target      `json:"targets"`
}

type latency struct {
	Name      string    `json:"name"`
	Runtime   string    `json:"runtime"`
	SamplesMs []float64 `json:"samples_ms"`
	// StartMs and ProgramMs split each of a daemon's samples: the time to
	// the daemon's word that the program started, and the program's own.
	StartMs   []float64 `json:"start_ms,omitempty"`
	ProgramMs []float64 `json:"program_ms,omitempty"`
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
	// the backend's daemons, shims, OCI runtime, init, sandboxd and the
	// program together.
	CPUMsPerTask float64 `json:"cpu_ms_per_task"`
	// CPU is CPUMsPerTask by process, sampled (empty without perf).
	CPU []cpuShare `json:"cpu_by_process,omitempty"`
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

// only says which one part of the bench to run, if not all.
// pairs, when set, is the backend/runtime pairs to start daemons for.
type only struct {
	sessions, clients, tools, throughput, latency, stdout, judge, processes bool
	pairs                                                                   string
}

func measure(runs int, duration time.Duration, out string, o only) error {
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
	start := func(name, backend, rt string, pool int, allowList bool, extra ...string) (*daemon, error) {
		d, err := startDaemon(ctx, dir, name, backend, rt, pool, allowList, extra...)
		if err == nil {
			daemons = append(daemons, d)
		}
		return d, err
	}
	// The judge workload, first: on the default backend and OCI runtime,
	// its daemon alone on the host.
	var judged []judgeRate
	if o.judge || o == (only{}) {
		d, err := start("judge", "direct", "crun", 2, false, "--max-running", strconv.Itoa(judgeConcurrency))
		if err != nil {
			return fmt.Errorf("judge: %w", err)
		}
		if judged, err = measureJudge(ctx, d, "direct/crun"); err != nil {
			return fmt.Errorf("judge: %w", err)
		}
		reportJudge(os.Stdout, judged)
		d.stop()
		daemons = daemons[:len(daemons)-1]
		if o.judge {
			return writeResults(results{When: time.Now().UTC(), Judge: judged, Targets: judgeTargets(judged)}, out)
		}
	}
	// The workstation workload: on the default backend, alone too.
	var stations []workstation
	if o.processes || o == (only{}) {
		inbound, err := freeLoopback()
		if err != nil {
			return err
		}
		d, err := start("workstation", "direct", "crun", 2, false, "--inbound-listen", inbound)
		if err != nil {
			return fmt.Errorf("workstation: %w", err)
		}
		if stations, err = measureWorkstation(ctx, d, inbound); err != nil {
			return fmt.Errorf("workstation: %w", err)
		}
		reportWorkstation(os.Stdout, stations)
		d.stop()
		daemons = daemons[:len(daemons)-1]
		if o.processes {
			return writeResults(results{When: time.Now().UTC(), Workstation: stations, Targets: workstationTargets(stations)}, out)
		}
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
		{"direct/runc warm", "direct", "runc", 2}, {"direct/runc cold", "direct", "runc", 0},
		{"direct/crun warm", "direct", "crun", 2}, {"direct/crun cold", "direct", "crun", 0},
		{"direct/runsc warm", "direct", "runsc", 2}, {"direct/runsc cold", "direct", "runsc", 0},
		// Allow-listed tasks: linked to the egress gateway, from its pool.
		{"docker/runc allowlist", "docker", "runc", 2}, {"containerd/runc allowlist", "containerd", "runc", 2},
		{"direct/runc allowlist", "direct", "runc", 2},
	} {
		if (o.throughput || o.stdout) && (s.pool == 0 || strings.HasSuffix(s.name, " allowlist")) || o.stdout && s.runtime == "runsc" ||
			o.pairs != "" && !slices.Contains(strings.Split(o.pairs, ","), s.backend+"/"+s.runtime) {
			continue
		}
		d, err := start(strings.NewReplacer("/", "-", " ", "-").Replace(s.name), s.backend, s.runtime, s.pool, strings.HasSuffix(s.name, " allowlist"))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		contenders = append(contenders, &contender{name: "sandboxd " + s.name, runtime: s.runtime, warm: s.pool > 0, daemon: d})
	}
	if len(contenders) == 0 {
		return fmt.Errorf("no backend/runtime pair is %s", o.pairs)
	}
	// The command line, its own process and dial included.
	contenders = append(contenders, &contender{name: "sandboxd run (CLI) " + strings.TrimPrefix(contenders[0].name, "sandboxd "),
		runtime: contenders[0].runtime, warm: true, daemon: contenders[0].daemon, run: cliRun(contenders[0].daemon)})
	for _, rt := range ociRuntimes {
		contenders = append(contenders, &contender{name: "docker run --rm", runtime: rt, run: dockerRun(rt)})
		execRun, pid, cleanup, err := dockerExec(ctx, rt)
		if err != nil {
			return err
		}
		defer cleanup()
		contenders = append(contenders, &contender{name: "docker exec", runtime: rt, run: execRun})
		if rt == "runc" {
			contenders = append(contenders, &contender{name: floorName, runtime: rt, run: bareInterpreter(pid)})
		}
	}

	res := results{When: time.Now().UTC(), Judge: judged, Workstation: stations}
	res.Host, _ = os.Hostname()
	var warm []*contender
	for _, c := range contenders {
		if c.daemon != nil && c.warm && c.run == nil && c.daemon.network.Mode == "" {
			warm = append(warm, c)
		}
	}
	if o.stdout {
		if err := measureStdoutInto(ctx, &res, warm, runs); err != nil {
			return err
		}
		res.Targets = checkTargets(res)
		return writeResults(res, out)
	}
	if !o.throughput {
		if done, err := measureLatencies(ctx, &res, contenders, warm, dir, out, runs, o); done || err != nil {
			return err
		}
	}

	fmt.Printf("\nthroughput of print(1), %v per level\n\n", duration)
	// Each level starts with every pool full and the host quiet: a gVisor
	// pool's fill (seconds of CPU) would be counted to whatever ran beside it.
	if err := settle(ctx, contenders); err != nil {
		return err
	}
	seq, err := sequentialDocker(ctx, dir, duration)
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
	// The interpreter alone, at every level: the floor a task's CPU and
	// rate are held to.
	floorContender := &contender{name: floorName, run: chrootedInterpreter()}
	for _, c := range append(contenders, floorContender) {
		// Each OCI runtime on each backend: where a task's CPU goes
		// changes with the runtime, and the CPU is what caps it.
		if c.run != nil && c != floorContender || c.run == nil && (!c.warm || c.daemon == nil || c.daemon.network.Mode != "") {
			continue
		}
		do := c.run
		if do == nil {
			dm := c.daemon
			do = func(ctx context.Context) error {
				_, err := dm.hello(ctx, "", "", run.InterpreterAny)
				return err
			}
		}
		for _, n := range []int{1, 2, 4, 8, 16} {
			if err := settle(ctx, contenders); err != nil {
				return err
			}
			tp, err := measureThroughput(ctx, do, c.name, dir, n, duration)
			if err != nil {
				return err
			}
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
	fmt.Printf("\nhost CPU per task by process (ms, sampled with perf; \"sampled\" is their sum)\n\n")
	reportCPU(os.Stdout, res.Throughput)
	fmt.Printf("\ndaemon RSS (%s): idle %.1f MiB, under load up to %.1f MiB, %.0f s after the load %.1f MiB\n",
		res.Memory.Daemon, res.Memory.IdleMiB, res.Memory.PeakMiB, res.Memory.AfterWaitS, res.Memory.AfterMiB)

	res.Targets = slices.Concat(checkTargets(res), sessionTargets(res.Sessions, res.Live), clientTargets(res.Clients), toolTargets(res.ToolCalls), judgeTargets(res.Judge), workstationTargets(res.Workstation))
	return writeResults(res, out)
}

// measureLatencies measures tool calls, clients, sessions and latencies
// into res, and says whether the bench is done (one of them, or the
// latency of print(1), was all it was asked for).
func measureLatencies(ctx context.Context, res *results, contenders, warm []*contender, dir, out string, runs int, o only) (bool, error) {
	if !o.latency {
		if done, err := measureCallers(ctx, res, warm, dir, out, runs, o); done || err != nil {
			return done, err
		}
	}
	fmt.Printf("\nlatency of print(1), %d sequential runs each, interleaved (before each run, untimed: every pool full, every removal done, the host quiet)\n\n", runs)
	if err := measureLatency(ctx, contenders, runs); err != nil {
		return false, err
	}
	res.Latency = reportLatency(os.Stdout, contenders)
	fmt.Printf("\nwhere the warm runs' time goes: the median of each part over all runs, and over the slowest 5%%\n\n")
	reportParts(os.Stdout, contenders)
	if o.latency {
		res.Targets = checkTargets(*res)
		return true, writeResults(*res, out)
	}

	langRuns := max(runs/4, 10)
	fmt.Printf("\nlatency of a program that prints 1, per language, on %s, %d sequential runs each, interleaved\n\n", contenders[0].name, langRuns)
	langs, err := languageContenders(ctx, contenders[0])
	if err != nil {
		return false, err
	}
	if err := measureLatency(ctx, langs, langRuns); err != nil {
		return false, err
	}
	res.Languages = reportLatency(os.Stdout, langs)
	return false, measureStdoutInto(ctx, res, warm, runs)
}

// measureStdoutInto measures 16 MiB of stdout on the warm contenders but
// gVisor's into res.
func measureStdoutInto(ctx context.Context, res *results, warm []*contender, runs int) error {
	var outs []*contender
	for _, c := range warm {
		if c.runtime != "runsc" {
			outs = append(outs, c)
		}
	}
	stdoutRuns := max(runs/10, 5)
	fmt.Printf("\n16 MiB of stdout, end to end (request to result, the bundle kept), warm, %d runs each, interleaved\n\n", stdoutRuns)
	var err error
	if res.Stdout, err = measureStdout(ctx, outs, stdoutRuns); err != nil {
		return err
	}
	for _, r := range res.Stdout {
		fmt.Printf("  %-32s p50 %6.1f MiB/s\n", r.Name, r.P50MiB)
	}
	return nil
}

// measureCallers measures tool calls, clients and sessions into res, and
// says whether the bench is done (one of them was all it was asked for).
func measureCallers(ctx context.Context, res *results, warm []*contender, dir, out string, runs int, o only) (bool, error) {
	var err error
	fmt.Printf("tool calls: %d runs per warm daemon, each timing %d calls of a tool the bench answers at once (after %d untimed), in the sandbox\n\n", toolRuns, toolCalls, toolWarmup)
	if res.ToolCalls, err = measureToolCalls(ctx, warm); err != nil {
		return false, err
	}
	reportToolCalls(os.Stdout, res.ToolCalls)
	if o.tools {
		res.Targets = toolTargets(res.ToolCalls)
		return true, writeResults(*res, out)
	}

	fmt.Printf("\nclients: a warm print(1) on %s through the Go, Python and TypeScript clients, %d runs each, interleaved\n\n", warm[0].name, runs)
	if res.Clients, err = measureClients(ctx, warm[0], dir, runs); err != nil {
		return false, err
	}
	reportClients(os.Stdout, res.Clients)
	if o.clients {
		res.Targets = append(clientTargets(res.Clients), toolTargets(res.ToolCalls)...)
		return true, writeResults(*res, out)
	}

	fmt.Printf("\nsessions: %d rounds per warm daemon, interleaved: a warm run, CreateSession, %d calls of 1+1 (after an untimed first)\n\n", sessionRounds, sessionCalls)
	if res.Sessions, err = measureSessions(ctx, warm); err != nil {
		return false, err
	}
	if res.Live, err = holdSessions(ctx, warm[0].daemon, warm[0].name, 20); err != nil {
		return false, err
	}
	reportSessions(os.Stdout, res.Sessions, res.Live)
	if o.sessions {
		res.Targets = append(append(sessionTargets(res.Sessions, res.Live), clientTargets(res.Clients)...), toolTargets(res.ToolCalls)...)
		return true, writeResults(*res, out)
	}
	return false, nil
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
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nresults written to %s, their chart to %s\n", out, chartPath(out))
	return drawChart(res, chartPath(out))
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
	ran      []ran // beside samples, for the daemon's runs
	notWarm  int
}

func measureLatency(ctx context.Context, cs []*contender, runs int) error {
	for round := -3; round < runs; round++ {
		for _, c := range cs {
			if err := settle(ctx, cs); err != nil {
				return err
			}
			start := time.Now()
			var r ran
			var err error
			if c.run == nil {
				r, err = c.daemon.hello(ctx, c.language, c.code, c.interp)
			} else {
				err = c.run(ctx)
			}
			took := time.Since(start)
			if err != nil {
				return fmt.Errorf("%s %s, run %d: %w", c.name, c.runtime, round, err)
			}
			switch {
			case round < 0: // warm-up
			case c.warm && c.run == nil && !r.warm:
				c.notWarm++
			default:
				c.samples = append(c.samples, took)
				if c.run == nil {
					c.ran = append(c.ran, r)
				}
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
			for _, r := range c.ran {
				l.StartMs, l.ProgramMs = append(l.StartMs, ms(r.toStart)), append(l.ProgramMs, ms(r.program))
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

// reportParts splits the warm daemon runs' time into the part before the
// program started, the program's own and the part after it, for all runs
// and for the slowest: where a tail's milliseconds go.
func reportParts(w io.Writer, cs []*contender) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\truns\ttotal\tto start\tprogram\tafter\t\n")
	row := func(name string, samples []time.Duration, rs []ran) {
		var total, start, program, after []time.Duration
		for i, r := range rs {
			total, start, program = append(total, samples[i]), append(start, r.toStart), append(program, r.program)
			after = append(after, samples[i]-r.toStart-r.program)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t\n", name, len(rs),
			ms(percentile(total, 50)), ms(percentile(start, 50)), ms(percentile(program, 50)), ms(percentile(after, 50)))
	}
	for _, c := range cs {
		if !c.warm || len(c.ran) != len(c.samples) || len(c.ran) == 0 {
			continue
		}
		row(c.name, c.samples, c.ran)
		// The slowest 5%, at least one run.
		order := make([]int, len(c.samples))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(c.samples[b], c.samples[a]) })
		var samples []time.Duration
		var rs []ran
		for _, i := range order[:max(1, len(order)/20)] {
			samples, rs = append(samples, c.samples[i]), append(rs, c.ran[i])
		}
		row("  slowest 5%", samples, rs)
	}
	tw.Flush()
}

// measureThroughput runs print(1) from n callers for d and counts.
func measureThroughput(ctx context.Context, do func(context.Context) error, name, dir string, n int, d time.Duration) (throughput, error) {
	cpu, err := meterCPU(dir)
	if err != nil {
		return throughput{}, err
	}
	var tasks, errs, wrong atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				err := do(ctx)
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
	return t, cpu.read(ctx, &t)
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
func sequentialDocker(ctx context.Context, dir string, d time.Duration) (throughput, error) {
	cpu, err := meterCPU(dir)
	if err != nil {
		return throughput{}, err
	}
	rn := dockerRun("runc")
	n := 0
	start := time.Now()
	for time.Since(start) < d && err == nil {
		if err = rn(ctx); err == nil {
			n++
		}
	}
	t := throughput{Name: "docker run --rm (sequential)", Concurrency: 1, Tasks: n, PerSecond: float64(n) / time.Since(start).Seconds()}
	if cerr := cpu.read(ctx, &t); err == nil {
		err = cerr
	}
	return t, err
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
	find := func(ls []latency, name, rt string) (latency, bool) {
		for _, l := range ls {
			if l.Name == name && l.Runtime == rt {
				return l, len(l.SamplesMs) > 0
			}
		}
		return latency{}, false
	}
	var out []target
	add := func(what, result string, met bool) { out = append(out, target{What: what, Result: result, Met: met}) }
	for _, c := range []struct {
		name, runtime string
		bound         float64
	}{{"sandboxd docker/runc warm", "runc", 10}, {"sandboxd containerd/runc warm", "runc", 10},
		{"sandboxd docker/runsc warm", "runsc", 30}, {"sandboxd containerd/runsc warm", "runsc", 30},
		{fmt.Sprintf("sandboxd docker/runc warm python numpy+pandas, %s", run.InterpreterPrestarted), "runc", 20}} {
		l, ok := find(slices.Concat(res.Latency, res.Languages), c.name, c.runtime)
		if ok {
			add(fmt.Sprintf("%s p50 <= %.0f ms", c.name, c.bound), fmt.Sprintf("%.1f ms", l.P50Ms), l.P50Ms <= c.bound)
		}
	}
	for _, l := range res.Latency {
		if strings.HasPrefix(l.Name, "sandboxd ") && strings.HasSuffix(l.Name, " warm") && len(l.SamplesMs) > 0 {
			add(l.Name+" p99 <= 2 x p50", fmt.Sprintf("p99 %.1f ms, p50 %.1f ms: %.2fx", l.P99Ms, l.P50Ms, l.P99Ms/l.P50Ms), l.P99Ms <= 2*l.P50Ms)
		}
	}
	for _, backend := range []string{"docker", "containerd", "direct"} {
		none, ok1 := find(res.Latency, "sandboxd "+backend+"/runc warm", "runc")
		list, ok2 := find(res.Latency, "sandboxd "+backend+"/runc allowlist", "runc")
		if ok1 && ok2 {
			r := list.P50Ms / none.P50Ms
			add(fmt.Sprintf("sandboxd %s/runc warm: allow-listed p50 <= 1.2 x no network", backend),
				fmt.Sprintf("%.1f ms vs %.1f ms: %.2fx", list.P50Ms, none.P50Ms, r), r <= 1.2)
		}
	}
	for _, cli := range res.Latency {
		docker, ok := find(res.Latency, "docker run --rm", cli.Runtime)
		if strings.HasPrefix(cli.Name, "sandboxd run (CLI)") && ok && len(cli.SamplesMs) > 0 {
			r := cli.P50Ms / docker.P50Ms
			add(fmt.Sprintf("%s p50 <= 0.06 x docker run --rm (%s)", cli.Name, cli.Runtime), fmt.Sprintf("%.1f ms vs %.1f ms: %.3fx", cli.P50Ms, docker.P50Ms, r), r <= 0.06)
		}
	}
	for _, r := range res.Stdout {
		add(r.Name+": 16 MiB of stdout end to end >= 200 MiB/s (p50)", fmt.Sprintf("%.1f MiB/s", r.P50MiB), r.P50MiB >= 200)
	}
	// The best backend and OCI runtime at concurrency 8.
	var best, leanest throughput
	for _, t := range res.Throughput {
		if t.Concurrency != 8 || t.Errors > 0 || t.Wrong > 0 || !strings.HasPrefix(t.Name, "sandboxd ") {
			continue
		}
		if t.PerSecond > best.PerSecond {
			best = t
		}
		if leanest.Name == "" || t.CPUMsPerTask < leanest.CPUMsPerTask {
			leanest = t
		}
	}
	for _, t := range res.Throughput {
		if t.Concurrency == 8 && (t.Errors > 0 || t.Wrong > 0) {
			add(t.Name+" at concurrency 8: no errors, right output", fmt.Sprintf("%d errors, %d wrong", t.Errors, t.Wrong), false)
		}
	}
	if best.Name != "" {
		add("throughput at concurrency 8, best pair, >= 40 tasks/s", fmt.Sprintf("%s: %.1f tasks/s", best.Name, best.PerSecond), best.PerSecond >= 40)
		add("host CPU per task at concurrency 8, leanest pair, <= 50 ms", fmt.Sprintf("%s: %.0f ms", leanest.Name, leanest.CPUMsPerTask), leanest.CPUMsPerTask <= 50)
		if f, ok := floorAt(res.Throughput, 8); ok {
			r := best.PerSecond / f.PerSecond
			add("throughput at concurrency 8, best pair, >= 0.35 x the chrooted interpreter", fmt.Sprintf("%s: %.1f vs %.1f tasks/s: %.2fx", best.Name, best.PerSecond, f.PerSecond, r), r >= 0.35)
			c := leanest.CPUMsPerTask / f.CPUMsPerTask
			add("host CPU per task at concurrency 8, leanest pair, <= 4 x the chrooted interpreter's", fmt.Sprintf("%s: %.0f vs %.0f ms: %.1fx", leanest.Name, leanest.CPUMsPerTask, f.CPUMsPerTask, c), c <= 4)
		}
	}
	for _, t := range res.Throughput {
		if t.Concurrency != 8 || t.Errors > 0 || t.Wrong > 0 {
			continue
		}
		if d := daemonShare(t); d > 0 && strings.Contains(t.Name, "direct/") {
			add(t.Name+" at concurrency 8: the daemon's own CPU per task <= 5 ms", fmt.Sprintf("%.1f ms", d), d <= 5)
		}
		if strings.Contains(t.Name, "direct/runsc") {
			add(t.Name+" at concurrency 8: <= 250 ms of host CPU per task, >= 8 tasks/s", fmt.Sprintf("%.0f ms, %.1f tasks/s", t.CPUMsPerTask, t.PerSecond), t.CPUMsPerTask <= 250 && t.PerSecond >= 8)
		}
	}
	if bare, ok := find(res.Latency, floorName, "runc"); ok {
		for _, name := range []string{"sandboxd direct/runc warm", "sandboxd direct/crun warm"} {
			rt := strings.TrimSuffix(strings.TrimPrefix(name, "sandboxd direct/"), " warm")
			if l, ok := find(res.Latency, name, rt); ok {
				r := l.P50Ms / bare.P50Ms
				add(name+" p50 <= 0.6 x the chrooted interpreter", fmt.Sprintf("%.1f ms vs %.1f ms: %.2fx", l.P50Ms, bare.P50Ms, r), r <= 0.6)
			}
		}
	}
	if m := res.Memory; m.IdleMiB > 0 {
		add("daemon RSS idle <= 40 MiB", fmt.Sprintf("%.1f MiB", m.IdleMiB), m.IdleMiB <= 40)
		add("daemon RSS back within 10% of idle after the load", fmt.Sprintf("%.1f MiB after, %.1f MiB idle", m.AfterMiB, m.IdleMiB), m.AfterMiB <= 1.1*m.IdleMiB)
	}
	return out
}

// daemon is a `sandboxd serve` process of the bench's own.
type daemon struct {
	cmd    *exec.Cmd
	socket string
	client *client.Client
	pool   int
	// cgroups holds a parent cgroup per container of the daemon's
	// instance; nil without a cgroup file system.
	cgroups  *cgroup.Hierarchy
	instance string
	// network is what each run asks for.
	network netpolicy.Request
}

// benchSubnets gives each allow-listing daemon an egress subnet of its own.
var benchSubnets int

func startDaemon(ctx context.Context, dir, name, backend, rt string, pool int, allowList bool, extra ...string) (*daemon, error) {
	state := filepath.Join(dir, name)
	socket := filepath.Join(state, "sandboxd.sock")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	instance := "bench-" + name
	cmd := exec.Command("bin/sandboxd", "serve", "--socket", socket, "--state-dir", state,
		"--artifacts-dir", filepath.Join(state, "artifacts"), "--instance", instance,
		"--backend", backend, "--default-runtime", rt,
		"--pool-size", strconv.Itoa(pool), "--log-level", "warn", "--max-sessions", "24")
	cmd.Args = append(cmd.Args, extra...)
	d := &daemon{cmd: cmd, socket: socket, pool: pool, instance: instance}
	if h, err := cgroup.Open("/sys/fs/cgroup"); err == nil {
		d.cgroups = &h
	}
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
	client, err := client.Dial(client.DialOptions{Socket: socket})
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
		if ctx.Err() != nil {
			d.stop()
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the daemon %s did not come up", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settle waits, untimed, until every pool of the contenders' daemons is
// full, no container of theirs is left to remove, and the host has gone
// quiet: the run before (a container's removal, which goes on after its
// caller has the result, another daemon's refill) would otherwise be timed
// with this one. Quiet is under a quarter of the CPUs busy for 50 ms;
// after 3 s the run goes on regardless.
func settle(ctx context.Context, cs []*contender) error {
	seen := map[*daemon]bool{}
	for _, c := range cs {
		if d := c.daemon; d != nil && !seen[d] {
			seen[d] = true
			if err := d.idle(ctx); err != nil {
				return err
			}
		}
	}
	const window = 50 * time.Millisecond
	quiet := time.Duration(goruntime.NumCPU()) * window / 4
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		before := hostBusy()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		if hostBusy()-before < quiet {
			return nil
		}
	}
	return nil
}

// poolReady waits until the daemon's pool is full.
func (d *daemon) poolReady(ctx context.Context) error { return d.wait(ctx, false) }

// idle waits until the daemon's pool is full and it has removed every
// container but those its pool keeps. Their removal outlasts a quiet
// window: a cold run's, 60 ms before a warm one, made it 1.5x slower
// (21.0 against 14.5 ms p50 on docker/runc; 300 ms before it, not).
// A container that stays longer than 5 s is not waited for.
func (d *daemon) idle(ctx context.Context) error { return d.wait(ctx, true) }

func (d *daemon) wait(ctx context.Context, removed bool) error {
	deadline := time.Now().Add(30 * time.Second)
	removals := time.Now().Add(5 * time.Second)
	for {
		inv, err := d.client.Inventory(ctx)
		if err != nil {
			return err
		}
		full, kept := d.pool == 0 || len(inv.Pools) > 0, 0
		for _, p := range inv.Pools {
			full = full && p.Ready >= p.Size
			kept += p.Size
		}
		if full && (!removed || d.containers() <= kept || time.Now().After(removals)) {
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

// ran is how one run of hello went, seen from the caller.
type ran struct {
	warm bool
	// toStart is from the request to the daemon's word that the program
	// started; program is the program's own wall time, as the backend saw
	// it. The rest of a run's time is after the program: its end reaching
	// the daemon, the bundle, the result.
	toStart, program time.Duration
}

// hello runs the program of language (python's when empty) that prints
// 1, or code, in the interpreter interp asks for, and says how it went.
func (d *daemon) hello(ctx context.Context, language, code string, interp run.Interpreter) (ran, error) {
	if language == "" {
		language = "python"
	}
	if code == "" {
		code = hello[language]
	}
	out := stdout{asked: time.Now()}
	res, err := d.client.Run(ctx, run.Request{Program: &run.Program{Language: language, Code: code}, Options: run.Options{Network: d.network, Interpreter: interp}}, &out)
	if err != nil {
		return ran{}, err
	}
	if res.Status != run.StatusOK || string(out.out) != "1\n" || res.BundleError != "" {
		return ran{}, fmt.Errorf("%w: %v %q %s", errWrongOutput, res.Status, out.out, res.BundleError)
	}
	return ran{warm: res.Start == run.StartWarm, toStart: out.started, program: res.Duration}, nil
}

// stdout keeps a run's stdout, and when the daemon said the program
// started.
type stdout struct {
	out     []byte
	asked   time.Time
	started time.Duration
}

func (o *stdout) Started(run.Started) error {
	o.started = time.Since(o.asked)
	return nil
}

func (o *stdout) Output(s run.Stream, p []byte) error {
	if s == run.Stdout {
		o.out = append(o.out, p...)
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

// containers counts the containers of the daemon's instance that are not
// removed yet: each has a parent cgroup of its own below the instance's,
// gone once its removal is done.
func (d *daemon) containers() int {
	if d.cgroups == nil {
		return 0
	}
	children, _ := d.cgroups.Children(cgroup.InstanceParent(d.instance))
	return len(children)
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
// made per run, so it is the floor of a round-trip through Docker.
// It also gives the container's pid on the host.
func dockerExec(ctx context.Context, rt string) (func(context.Context) error, string, func(), error) {
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--runtime", rt, "--network", "none", "--label", "io.sandboxd.bench=exec",
		"sandboxd/python", "sleep", "infinity").Output()
	if err != nil {
		return nil, "", nil, fmt.Errorf("start the docker exec container: %w", err)
	}
	id := strings.TrimSpace(string(out))
	cleanup := func() { exec.Command("docker", "rm", "-f", id).Run() }
	out, err = exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.State.Pid}}", id).Output()
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("the docker exec container's pid: %w", err)
	}
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
	return rn, strings.TrimSpace(string(out)), cleanup, nil
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
