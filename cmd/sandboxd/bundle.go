package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/artifacts"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/server"
)

// runBundle is `sandboxd bundle get DIGEST -o FILE`.
func runBundle(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "get" {
		fmt.Fprintln(stderr, "usage: sandboxd bundle get DIGEST -o FILE")
		return exitError{2}
	}
	var c clientFlags
	fs := flag.NewFlagSet("bundle get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	out := fs.String("o", "", "file to write the bundle to (- for stdout)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		fmt.Fprintln(stderr, "usage: sandboxd bundle get DIGEST -o FILE")
		return exitError{2}
	}
	client, closeConn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	data, err := fetchBundle(context.Background(), client, pos[0])
	if err != nil {
		return err
	}
	// The daemon is trusted less than the digest: check before writing.
	b, err := artifacts.Verify(bytes.NewReader(data), pos[0], artifacts.DefaultReadLimits(), nil)
	if err != nil {
		return fmt.Errorf("the daemon sent a bundle that does not verify: %w", err)
	}
	if *out == "-" {
		_, err = stdout.Write(data)
		return err
	}
	if err := writeFileAtomic(*out, data); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%s, verified %s)\n", *out, units.BytesSize(float64(len(data))), b.Digest)
	return nil
}

func fetchBundle(ctx context.Context, client pb.SandboxServiceClient, digest string) ([]byte, error) {
	stream, err := client.GetBundle(ctx, &pb.GetBundleRequest{Digest: digest})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		buf.Write(chunk.GetData())
		if int64(buf.Len()) > artifacts.DefaultReadLimits().UncompressedBytes {
			return nil, errors.New("the bundle is larger than any this client reads")
		}
	}
}

func writeFileAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), ".bundle-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

// runVerify is `sandboxd verify BUNDLE`.
func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	want := fs.String("digest", "", "the digest the bundle must have (default: from a HEX.tar.zst file name)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd verify [--digest sha256:...] BUNDLE")
		return exitError{2}
	}
	name := pos[0]
	if *want == "" {
		*want = reproducer.DigestFromName(name)
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := artifacts.Verify(f, *want, artifacts.DefaultReadLimits(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd verify: %s: REFUSED: %v\n", name, err)
		return exitError{1}
	}
	checked := "no digest to check the whole against"
	if *want != "" {
		checked = "matches its expected digest"
	}
	fmt.Fprintf(stdout, "%s: sound bundle %s (%d entries, %s uncompressed; %s)\n", name, b.Digest,
		len(b.Manifest.Reproducible.Entries)+1, units.BytesSize(float64(b.UncompressedBytes)), checked)
	return nil
}

// runInspect is `sandboxd inspect BUNDLE`.
func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the manifest as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd inspect [--json] BUNDLE")
		return exitError{2}
	}
	rec, err := reproducer.LoadFile(pos[0], artifacts.DefaultReadLimits())
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd inspect: %s: REFUSED: %v\n", pos[0], err)
		return exitError{1}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rec.Manifest())
	}
	printBundle(stdout, rec)
	return nil
}

func printBundle(w io.Writer, rec *reproducer.Recorded) {
	m := rec.Manifest()
	r, run := m.Reproducible, m.Run
	q := r.Request
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	fmt.Fprintf(tw, "bundle\t%s (verified, %d entries, %s)\n", rec.Bundle.Digest, len(r.Entries)+1, size(rec.Bundle.UncompressedBytes))
	fmt.Fprintf(tw, "reproducible\t%s\n", run.ReproducibleDigest)
	fmt.Fprintf(tw, "run\t%s on instance %s, sandboxd %s\n", run.RunID, run.Instance, run.Version)
	fmt.Fprintf(tw, "\tstarted %s, ran %.1f ms, queued %.1f ms, peak memory %s\n", run.StartedAt.Format(time.RFC3339Nano), run.DurationMs, run.QueuedMs, size(run.PeakMemoryBytes))
	switch {
	case run.Start == "cold" && run.ColdReason != "":
		fmt.Fprintf(tw, "\tin a cold container: %s\n", run.ColdReason)
	case run.Start != "":
		fmt.Fprintf(tw, "\tin a %s container\n", run.Start)
	}
	what := "command"
	if q.Kind == "code" {
		what = q.Language + " code"
	}
	fmt.Fprintf(tw, "ran\t%s: %s\n", what, strings.Join(quoteAll(q.Argv), " "))
	fmt.Fprintf(tw, "image\t%s %s\n", r.Image, r.ImageDigest)
	fmt.Fprintf(tw, "runtime\t%s %s on %s\n", r.Runtime.Name, r.Runtime.Version, r.Backend)
	l := q.Limits
	fmt.Fprintf(tw, "limits\tmemory %s, cpu %dm, pids %d, timeout %v, stdout %s, stderr %s, disk %s\n", size(l.MemoryBytes), l.CPUMillis, l.Pids,
		l.Timeout, size(l.StdoutBytes), size(l.StderrBytes), size(l.DiskBytes))
	fmt.Fprintf(tw, "network\t%s\n", q.Network)
	fmt.Fprintf(tw, "workdir\t%s; mounts: %s; stdin: %v; seed: %s\n", q.Workdir, orDash(strings.Join(q.Mounts, " ")), q.Stdin, orDash(q.Seed))
	fmt.Fprintf(tw, "determinism\t%s\n", sortedPairs(r.Determinism))
	fmt.Fprintf(tw, "env\t%s\n", strings.Join(r.Environment, " "))
	for _, f := range q.Files {
		fmt.Fprintf(tw, "input\t%s (%s)\n", f.Path, size(int64(len(rec.Entries[artifacts.DirInput+"/"+f.Path]))))
	}
	o := r.Outcome
	fmt.Fprintf(tw, "outcome\t%s, exit code %d: %s\n", o.Status, o.ExitCode, run.Message)
	fmt.Fprintf(tw, "\tstdout %s written (%s kept), stderr %s written (%s kept)\n", size(o.StdoutTotal),
		size(int64(len(rec.Entries[artifacts.EntryStdout]))), size(o.StderrTotal), size(int64(len(rec.Entries[artifacts.EntryStderr]))))
	for _, out := range r.Outputs {
		note := out.Type
		if out.Type == "file" {
			note = fmt.Sprintf("file, %s", size(out.Size))
			if out.SHA256 != "" {
				note += ", sha256 " + out.SHA256[:16] + "..."
			}
		}
		if out.Omitted != "" {
			note += " (not stored: " + out.Omitted + ")"
		}
		fmt.Fprintf(tw, "output\t%s: %s\n", out.Path, note)
	}
	if r.OutputsTruncated {
		fmt.Fprintf(tw, "output\t(the listing stopped at its limit)\n")
	}
	tw.Flush()
	for _, e := range []string{artifacts.EntryStdout, artifacts.EntryStderr} {
		if b := rec.Entries[e]; len(b) > 0 {
			fmt.Fprintf(w, "\n--- %s (first lines)\n%s\n", e, head(b, 10))
		}
	}
}

func head(b []byte, lines int) string {
	s := string(bytes.ToValidUTF8(b, []byte("?")))
	parts := strings.SplitN(s, "\n", lines+1)
	if len(parts) > lines {
		parts = append(parts[:lines], "...")
	}
	return strings.TrimRight(strings.Join(parts, "\n"), "\n")
}

func quoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$") {
			out[i] = fmt.Sprintf("%q", a)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedPairs(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, " ")
}

// runReplay is `sandboxd replay BUNDLE`.
func runReplay(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	drift := fs.Bool("allow-image-drift", false, "when the recorded image is gone, run on the current image of its name and warn")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd replay [--json] [--allow-image-drift] BUNDLE")
		return exitError{2}
	}
	rec, err := reproducer.LoadFile(pos[0], artifacts.DefaultReadLimits())
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd replay: %s: REFUSED: %v\n", pos[0], err)
		return exitError{1}
	}
	client, closeConn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	rep, err := reproducer.Replay(context.Background(), rec, &grpcRunner{client: client}, reproducer.Options{AllowImageDrift: *drift})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(stdout, rep)
	}
	if !rep.Reproduced {
		return exitError{1}
	}
	return nil
}

func printReport(w io.Writer, rep *reproducer.Report) {
	fmt.Fprintf(w, "replayed run %s (bundle %s)\n      as run %s (bundle %s)\n\n", rep.RecordedRun, rep.RecordedBundle, rep.ReplayedRun, rep.ReplayedBundle)
	differ := 0
	for _, c := range rep.Checks {
		mark := "match  "
		if !c.Match {
			mark = "DIFFERS"
			differ++
		}
		line := fmt.Sprintf("  %s  %s", mark, c.Name)
		if !c.Match && (c.Recorded != "" || c.Replayed != "") {
			line += fmt.Sprintf(": recorded %s, replayed %s", c.Recorded, c.Replayed)
		}
		fmt.Fprintln(w, line)
		if c.Diff != "" {
			for _, l := range strings.Split(c.Diff, "\n") {
				fmt.Fprintf(w, "           %s\n", l)
			}
		}
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warning)
	}
	if rep.Reproduced {
		fmt.Fprintf(w, "\nreproduced: all %d checks match\n", len(rep.Checks))
	} else {
		fmt.Fprintf(w, "\nNOT reproduced: %d of %d checks differ\n", differ, len(rep.Checks))
	}
}

// grpcRunner runs a recorded request on a daemon and fetches the new bundle.
type grpcRunner struct {
	client pb.SandboxServiceClient
}

func (g *grpcRunner) Run(ctx context.Context, req reproducer.Request) (*reproducer.Recorded, error) {
	opts := &pb.RunOptions{
		Image: req.Image, Runtime: req.Runtime, Mounts: req.Mounts, Env: req.Env, Stdin: req.Stdin,
		Workdir: req.Workdir, Seed: req.Seed,
		Limits: &pb.Limits{MemoryBytes: req.Limits.MemoryBytes, CpuMillis: req.Limits.CPUMillis, Pids: req.Limits.Pids,
			TimeoutMs: req.Limits.Timeout.Milliseconds(), StdoutBytes: req.Limits.StdoutBytes, StderrBytes: req.Limits.StderrBytes,
			DiskBytes: req.Limits.DiskBytes},
	}
	if req.Network == "none" {
		opts.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}
	}
	for _, f := range req.Files {
		opts.Files = append(opts.Files, &pb.File{Path: f.Path, Content: f.Content, Executable: f.Executable})
	}
	var events interface {
		Recv() (*pb.RunEvent, error)
	}
	var err error
	switch {
	case req.Kind == "code":
		events, err = g.client.RunCode(ctx, &pb.RunCodeRequest{Language: req.Language, Code: req.Code, Options: opts})
	case req.Shell != "":
		events, err = g.client.RunCommand(ctx, &pb.RunCommandRequest{Shell: req.Shell, Options: opts})
	default:
		events, err = g.client.RunCommand(ctx, &pb.RunCommandRequest{Argv: req.Argv, Options: opts})
	}
	if err != nil {
		return nil, runError(err)
	}
	var result *pb.Result
	for {
		ev, err := events.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, runError(err)
		}
		if r := ev.GetResult(); r != nil {
			result = r
		}
	}
	if result.GetBundleDigest() == "" {
		return nil, fmt.Errorf("the replayed run left no bundle: %s", result.GetBundleError())
	}
	data, err := fetchBundle(ctx, g.client, result.GetBundleDigest())
	if err != nil {
		return nil, err
	}
	return reproducer.Load(bytes.NewReader(data), result.GetBundleDigest(), artifacts.DefaultReadLimits())
}

// runError tells a missing image apart, so that a replay can drift.
func runError(err error) error {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == server.ReasonImageNotPresent {
			return fmt.Errorf("%w: %v", reproducer.ErrImageMissing, err)
		}
	}
	return err
}
