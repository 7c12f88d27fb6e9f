// Command bench measures sandboxd against plain Docker on this machine: the
// end-to-end latency of running print(1) in a fresh sandbox through the
// daemon's gRPC API, for each backend (Docker, containerd) and OCI runtime
// (runc, runsc), with its artifact bundle and, once, without, to show what
// the bundle costs; side by side with `docker run --rm` of the same image
// on runc and runsc, interleaved run by run so that all see the same
// machine; and the throughput of writing bundles. It prints tables and
// writes the samples to a JSON file.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/containerd"
	"github.com/sandboxd/sandboxd/runtime/docker"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task"
)

func main() {
	runs := flag.Int("runs", 50, "sequential runs of each contender")
	warmup := flag.Int("warmup", 3, "unmeasured runs of each contender first")
	out := flag.String("json", "bench/results/latest.json", "where to write the samples")
	flag.Parse()
	if err := run(*runs, *warmup, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// contender is one way of running print(1).
type contender struct {
	name    string
	run     func(context.Context) error
	samples []time.Duration
}

func run(runs, warmup int, out string) error {
	ctx := context.Background()
	onDocker, stop, err := startDaemon(ctx, "docker", "bench", true)
	if err != nil {
		return err
	}
	defer stop()
	onContainerd, stopContainerd, err := startDaemon(ctx, "containerd", "bench-containerd", true)
	if err != nil {
		return err
	}
	defer stopContainerd()
	bare, stopBare, err := startDaemon(ctx, "docker", "bench-nobundle", false)
	if err != nil {
		return err
	}
	defer stopBare()

	code := func(c pb.SandboxServiceClient, rt string) func(context.Context) error {
		return func(ctx context.Context) error { return runCode(ctx, c, rt) }
	}
	contenders := []*contender{
		{name: "sandboxd docker/runc", run: code(onDocker, "runc")},
		{name: "sandboxd docker/runc, no bundle", run: code(bare, "runc")},
		{name: "sandboxd containerd/runc", run: code(onContainerd, "runc")},
		{name: "docker run --rm (runc)", run: dockerRun("runc")},
		{name: "sandboxd docker/runsc", run: code(onDocker, "runsc")},
		{name: "sandboxd containerd/runsc", run: code(onContainerd, "runsc")},
		{name: "docker run --rm --runtime runsc", run: dockerRun("runsc")},
	}
	for _, c := range contenders {
		for range warmup {
			if err := c.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
	}
	// Interleave: each round runs every contender once, so drift on the
	// machine is shared.
	for i := range runs {
		for _, c := range contenders {
			start := time.Now()
			if err := c.run(ctx); err != nil {
				return fmt.Errorf("%s, run %d: %w", c.name, i, err)
			}
			c.samples = append(c.samples, time.Since(start))
		}
	}
	report(os.Stdout, contenders, runs)
	throughput, err := bundleThroughput()
	if err != nil {
		return err
	}
	return writeJSON(out, contenders, throughput)
}

// throughput is the write speed of bundles of one kind of content.
type throughput struct {
	Content     string  `json:"content"`
	MiB         float64 `json:"mib"`
	MedianMiBps float64 `json:"median_mib_per_s"`
}

// bundleThroughput writes 64 MiB bundles of text-like and of random
// content to a store on the state folder's disk, five times each, and
// reports the median speed in uncompressed MiB per second.
func bundleThroughput() ([]throughput, error) {
	dir, err := os.MkdirTemp("/var/tmp", "sandboxd-bench-store-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := artifacts.OpenStore(dir, artifacts.DefaultStoreOptions())
	if err != nil {
		return nil, err
	}
	const size = 64 << 20
	text := []byte(strings.Repeat("timestamp=2026-11-29 level=info msg=\"step done\" loss=0.0123\n", size/60+1))[:size]
	random := make([]byte, size)
	rand.Read(random)
	var out []throughput
	for _, c := range []struct {
		name string
		data []byte
	}{{"text (log lines)", text}, {"random bytes", random}} {
		var speeds []float64
		for i := range 5 {
			m := &artifacts.Manifest{Run: artifacts.Run{RunID: fmt.Sprint(i)}}
			start := time.Now()
			if _, _, err := store.Write(m, []artifacts.Source{artifacts.BytesSource("output/data", c.data, false)}); err != nil {
				return nil, err
			}
			speeds = append(speeds, float64(size)/(1<<20)/time.Since(start).Seconds())
		}
		slices.Sort(speeds)
		out = append(out, throughput{Content: c.name, MiB: size >> 20, MedianMiBps: speeds[len(speeds)/2]})
	}
	fmt.Printf("\nbundle write (hash, tar, zstd, fsync, rename), 64 MiB of output, median of 5:\n")
	for _, t := range out {
		fmt.Printf("  %-18s %6.0f MiB/s\n", t.Content, t.MedianMiBps)
	}
	return out, nil
}

// startDaemon runs the engine on a backend and its gRPC server in this
// process, on a unix socket of its own, as `sandboxd serve` wires them.
func startDaemon(ctx context.Context, backend, instance string, bundles bool) (pb.SandboxServiceClient, func(), error) {
	dir, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	initPath, err := filepath.Abs("bin/sandboxd-init")
	if err != nil {
		return nil, nil, err
	}
	var rt interface {
		runtime.Runtime
		Close() error
	}
	if backend == "containerd" {
		rt, err = containerd.Connect(ctx, "/run/containerd/containerd.sock", "sandboxd", initPath, filepath.Join(dir, "netns"),
			"/sys/fs/cgroup", "/sandboxd/"+instance, containerd.WithRunsc("/usr/local/lib/sandboxd/runsc", "/run/containerd/runsc"), containerd.WithLogger(log))
	} else {
		rt, err = docker.Connect(ctx, "", initPath, "/sys/fs/cgroup", "/sandboxd/"+instance, docker.WithLogger(log))
	}
	if err != nil {
		return nil, nil, err
	}
	cfg := task.DefaultConfig()
	cfg.Instance = instance
	cfg.StateDir = filepath.Join(dir, "state")
	if bundles {
		store, err := artifacts.OpenStore(filepath.Join(dir, "artifacts"), artifacts.DefaultStoreOptions())
		if err != nil {
			return nil, nil, err
		}
		cfg.Artifacts = store
	}
	svc, err := task.New(ctx, rt, cfg, task.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "sandboxd.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	g := server.NewGRPCServer(server.New(svc), server.NewHealth(), server.Options{})
	go g.Serve(lis)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		conn.Close()
		svc.Shutdown(context.Background())
		g.Stop()
		rt.Close()
		os.RemoveAll(dir)
	}
	return pb.NewSandboxServiceClient(conn), stop, nil
}

func runCode(ctx context.Context, c pb.SandboxServiceClient, runtime string) error {
	stream, err := c.RunCode(ctx, &pb.RunCodeRequest{Language: "python", Code: "print(1)", Options: &pb.RunOptions{Runtime: runtime}})
	if err != nil {
		return err
	}
	var stdout []byte
	var result *pb.Result
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		stdout = append(stdout, ev.GetStdout()...)
		if r := ev.GetResult(); r != nil {
			result = r
		}
	}
	if result.GetStatus() != pb.Status_OK || string(stdout) != "1\n" || result.GetBundleError() != "" {
		return fmt.Errorf("got %v %q, want OK \"1\\n\"", result.GetStatus(), stdout)
	}
	return nil
}

func dockerRun(runtime string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--runtime", runtime, "sandboxd/python", "python3", "-c", "print(1)").Output()
		if err != nil {
			return err
		}
		if string(out) != "1\n" {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
}

// percentile returns the nearest-rank percentile p of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// report prints a table; each contender's p50 is compared with the
// `docker run --rm` of its OCI runtime.
func report(w io.Writer, cs []*contender, runs int) {
	baseline := map[string]time.Duration{}
	for _, c := range cs {
		if strings.HasPrefix(c.name, "docker run") {
			baseline[ociRuntime(c.name)] = percentile(sorted(c.samples), 50)
		}
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "print(1), %d sequential runs each, interleaved, on %s (%s)\n\n", runs, host, time.Now().UTC().Format(time.DateOnly))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tp50\tp95\tp99\tp50 vs docker run --rm, same runtime\t\n")
	for _, c := range cs {
		s := sorted(c.samples)
		p50 := percentile(s, 50)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fx\t\n", c.name, ms(p50), ms(percentile(s, 95)), ms(percentile(s, 99)),
			float64(p50)/float64(baseline[ociRuntime(c.name)]))
	}
	tw.Flush()
}

// ociRuntime is the OCI runtime a contender's name says it uses.
func ociRuntime(name string) string {
	if strings.Contains(name, "runsc") {
		return "runsc"
	}
	return "runc"
}

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func writeJSON(path string, cs []*contender, bundles []throughput) error {
	type entry struct {
		Name      string    `json:"name"`
		SamplesMs []float64 `json:"samples_ms"`
		P50Ms     float64   `json:"p50_ms"`
		P99Ms     float64   `json:"p99_ms"`
	}
	var entries []entry
	for _, c := range cs {
		e := entry{Name: c.name}
		for _, d := range c.samples {
			e.SamplesMs = append(e.SamplesMs, float64(d)/float64(time.Millisecond))
		}
		s := sorted(c.samples)
		e.P50Ms = float64(percentile(s, 50)) / float64(time.Millisecond)
		e.P99Ms = float64(percentile(s, 99)) / float64(time.Millisecond)
		entries = append(entries, e)
	}
	b, err := json.MarshalIndent(map[string]any{"when": time.Now().UTC(), "contenders": entries, "bundle_write": bundles}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nsamples written to %s\n", path)
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
