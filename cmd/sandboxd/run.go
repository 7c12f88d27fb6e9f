package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
)

const runUsage = `usage:
  sandboxd run --lang python -c 'print(1)'     run code
  sandboxd run --lang python script.py         run a file's code
  sandboxd run -- ls -la /                     run a command (exec form)
  sandboxd run --sh 'ls | wc -l'               run a shell line

Output streams to this terminal, a status line goes to stderr, and the exit
code is the task's (125 when sandboxd itself failed).

flags:
`

// stringsFlag collects a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

type runFlags struct {
	client      clientFlags
	lang        string
	code        string
	shell       string
	opts        pb.RunOptions
	limits      pb.Limits
	timeout     time.Duration
	memory      byteSize
	disk        byteSize
	stdoutBytes byteSize
	stderrBytes byteSize
	files       stringsFlag
	mounts      stringsFlag
	env         stringsFlag
	stdin       bool
	json        bool
	quiet       bool
	seed        seedFlag
}

// seedFlag is an optional uint64.
type seedFlag struct{ v *uint64 }

func (s *seedFlag) String() string {
	if s == nil || s.v == nil {
		return ""
	}
	return strconv.FormatUint(*s.v, 10)
}

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return err
	}
	s.v = &n
	return nil
}

func runRun(args []string, stdout, stderr io.Writer) error {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	f.client.register(fs)
	fs.StringVar(&f.lang, "lang", "", "language of the code: python, bash, sh")
	fs.StringVar(&f.code, "c", "", "the code to run (with --lang)")
	fs.StringVar(&f.shell, "sh", "", "a shell line to run with /bin/sh -c")
	fs.StringVar(&f.opts.Image, "image", "", "image to run in (default: the language's)")
	fs.StringVar(&f.opts.Runtime, "runtime", "", "OCI runtime: runc or runsc")
	fs.StringVar(&f.opts.Workdir, "workdir", "", "working directory in /workspace")
	fs.Var(&f.memory, "memory", "memory limit, e.g. 256MiB")
	fs.Var(&f.disk, "disk", "size of /workspace and /tmp, e.g. 64MiB")
	fs.Int64Var(&f.limits.CpuMillis, "cpu-millis", 0, "CPU limit, 1000 = one core")
	fs.Int64Var(&f.limits.Pids, "pids", 0, "process and thread limit")
	fs.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit, e.g. 10s")
	fs.Var(&f.stdoutBytes, "stdout-bytes", "stdout delivered here, e.g. 64KiB")
	fs.Var(&f.stderrBytes, "stderr-bytes", "stderr delivered here, e.g. 64KiB")
	fs.Var(&f.files, "file", "LOCAL[:PATH] puts a local file at /input/PATH (default its base name); repeatable")
	fs.Var(&f.mounts, "mount", "NAME of an operator folder to mount at /mnt/NAME; repeatable")
	fs.Var(&f.env, "env", "KEY=VALUE for the program's environment; repeatable")
	fs.Var(&f.seed, "seed", "seed for SANDBOX_SEED, Python's random and numpy")
	fs.BoolVar(&f.stdin, "stdin", false, "send this command's stdin to the program")
	fs.BoolVar(&f.json, "json", false, "print the events as JSON lines instead of the output")
	fs.BoolVar(&f.quiet, "q", false, "no status line")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	client, closeConn, err := f.client.dial()
	if err != nil {
		return err
	}
	defer closeConn()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var stream grpc.ServerStreamingClient[pb.RunEvent]
	switch {
	case f.lang != "":
		code := f.code
		if code == "" {
			if fs.NArg() != 1 {
				return errors.New("with --lang, give the code with -c or one file of code")
			}
			b, err := os.ReadFile(fs.Arg(0))
			if err != nil {
				return err
			}
			code = string(b)
		} else if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q after -c", fs.Args())
		}
		stream, err = client.RunCode(ctx, &pb.RunCodeRequest{Language: f.lang, Code: code, Options: opts})
	case f.shell != "":
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q after --sh", fs.Args())
		}
		stream, err = client.RunCommand(ctx, &pb.RunCommandRequest{Shell: f.shell, Options: opts})
	case fs.NArg() > 0:
		stream, err = client.RunCommand(ctx, &pb.RunCommandRequest{Argv: fs.Args(), Options: opts})
	default:
		fs.Usage()
		return exitError{2}
	}
	if err != nil {
		return err
	}
	return f.follow(stream, stdout, stderr)
}

// options builds the request's options from the flags.
func (f *runFlags) options() (*pb.RunOptions, error) {
	opts := &f.opts
	f.limits.MemoryBytes = int64(f.memory)
	f.limits.DiskBytes = int64(f.disk)
	f.limits.StdoutBytes = int64(f.stdoutBytes)
	f.limits.StderrBytes = int64(f.stderrBytes)
	f.limits.TimeoutMs = f.timeout.Milliseconds()
	opts.Limits = &f.limits
	opts.Mounts = f.mounts
	opts.Seed = f.seed.v
	for _, spec := range f.files {
		local, dest, ok := strings.Cut(spec, ":")
		if !ok {
			dest = filepath.Base(local)
		}
		b, err := os.ReadFile(local)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(local)
		if err != nil {
			return nil, err
		}
		opts.Files = append(opts.Files, &pb.File{Path: dest, Content: b, Executable: st.Mode()&0o111 != 0})
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--env %q is not KEY=VALUE", kv)
		}
		if opts.Env == nil {
			opts.Env = map[string]string{}
		}
		opts.Env[k] = v
	}
	if f.stdin {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, err
		}
		opts.Stdin = b
	}
	return opts, nil
}

// follow copies a run's events to the terminal and turns its result into
// this command's exit code.
func (f *runFlags) follow(stream grpc.ServerStreamingClient[pb.RunEvent], stdout, stderr io.Writer) error {
	var result *pb.Result
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if f.json {
			b, _ := protojson.Marshal(ev)
			fmt.Fprintf(stdout, "%s\n", b)
		}
		switch e := ev.Event.(type) {
		case *pb.RunEvent_Stdout:
			if !f.json {
				stdout.Write(e.Stdout)
			}
		case *pb.RunEvent_Stderr:
			if !f.json {
				stderr.Write(e.Stderr)
			}
		case *pb.RunEvent_Result:
			result = e.Result
		}
	}
	if result == nil {
		return errors.New("the stream ended without a result")
	}
	if !f.quiet {
		fmt.Fprintln(stderr, statusLine(result))
	}
	return exitError{exitCode(result)}
}

// statusLine is the one-line summary printed after a run.
func statusLine(r *pb.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd: %s: %s", r.GetStatus(), r.GetMessage())
	if r.GetStdoutTruncated() {
		fmt.Fprintf(&b, "; stdout truncated to %d of %d bytes", r.GetLimits().GetStdoutBytes(), r.GetStdoutTotal())
	}
	if r.GetStderrTruncated() {
		fmt.Fprintf(&b, "; stderr truncated to %d of %d bytes", r.GetLimits().GetStderrBytes(), r.GetStderrTotal())
	}
	fmt.Fprintf(&b, " [%s, %v", r.GetStart(), r.GetDuration().AsDuration().Round(time.Millisecond))
	if r.GetPeakMemoryBytes() > 0 {
		fmt.Fprintf(&b, ", peak memory %.1f MiB", float64(r.GetPeakMemoryBytes())/(1<<20))
	}
	fmt.Fprintf(&b, ", run %s]", r.GetRunId())
	if r.GetBundleDigest() != "" {
		fmt.Fprintf(&b, "\nsandboxd: bundle %s", r.GetBundleDigest())
	} else if r.GetBundleError() != "" {
		fmt.Fprintf(&b, "\nsandboxd: no bundle: %s", r.GetBundleError())
	}
	return b.String()
}

// exitCode is the task's exit code, or a shell-like code for outcomes
// without one.
func exitCode(r *pb.Result) int {
	switch r.GetStatus() {
	case pb.Status_OK:
		return 0
	case pb.Status_CANCELLED:
		return 130
	case pb.Status_RUNTIME_ERROR:
		return 125
	}
	if c := int(r.GetExitCode()); c > 0 && c < 256 {
		return c
	}
	return 1
}
