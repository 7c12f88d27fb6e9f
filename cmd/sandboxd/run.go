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
	"strings"
	"syscall"
	"time"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task/run"
)

const runUsage = `usage:
  sandboxd run --lang python -c 'print(1)'     run code
  sandboxd run --lang python script.py         run a file's code
  sandboxd run -- ls -la /                     run a command (exec form)
  sandboxd run --sh 'ls | wc -l'               run a shell line
  sandboxd run --detach --lang python job.py   start it, print its run id, and return

Output streams to this terminal, a status line goes to stderr, and the exit
code is the task's (125 when sandboxd itself failed). A detached run goes on
without this command: follow it with sandboxd attach, logs or wait.

flags:
`

type runFlags struct {
	client      clientFlags
	lang        string
	code        string
	shell       string
	opts        run.Options
	cpuMillis   int64
	pids        int64
	timeout     time.Duration
	memory      byteSize
	disk        byteSize
	stdoutBytes byteSize
	stderrBytes byteSize
	files       stringsFlag
	mounts      stringsFlag
	env         stringsFlag
	stdin       bool
	detach      bool
	json        bool
	quiet       bool
	seed        seedFlag
	allowHosts  rulesFlag
	netPolicy   string
	secrets     stringsFlag
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
	f.registerOptions(fs)
	fs.StringVar(&f.opts.SessionID, "session", "", "run in this session (see sandboxd session): its workspace, processes and Python kernel")
	fs.BoolVar(&f.stdin, "stdin", false, "send this command's stdin to the program")
	fs.BoolVar(&f.detach, "detach", false, "print the run's id once it started, and leave it running")
	fs.StringVar(&f.opts.IdempotencyKey, "idempotency-key", "", "KEY: a retry with the same key and request gets the same run, not a second one")
	fs.Var((*stringsFlag)(&f.opts.Tools), "tool", "NAME or pattern (orders.*) of an operator's tool the program may call with `from sandboxd import tools`; repeatable (see docs/tools.md)")
	fs.BoolVar(&f.json, "json", false, "print the events as JSON lines instead of the output")
	fs.BoolVar(&f.quiet, "q", false, "no status line")
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	req, err := f.request(fs)
	if err != nil {
		return err
	}
	client, err := f.client.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.detach {
		st, err := client.Detach(ctx, req)
		if err != nil {
			return err
		}
		if f.json {
			return (&terminal{stdout: stdout, json: true}).Started(st)
		}
		fmt.Fprintln(stdout, st.RunID)
		return nil
	}
	res, err := client.Run(ctx, req, &terminal{stdout: stdout, stderr: stderr, json: f.json})
	if err != nil {
		return err
	}
	return ended(res, f.json, f.quiet, stdout, stderr)
}

// ended prints what follows a run's output: its result as JSON, or what
// a kernel showed and the status line; the exit code is the run's.
func ended(res run.Result, json, quiet bool, stdout, stderr io.Writer) error {
	if json {
		b, err := server.ResultJSON(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if k := res.Kernel; k != nil && !json && k.Result["text/plain"] != "" {
		// What IPython shows as Out[n].
		fmt.Fprintln(stdout, k.Result["text/plain"])
	}
	if !quiet {
		fmt.Fprintln(stderr, statusLine(res))
	}
	return exitError{exitCode(res)}
}

// registerOptions registers the flags of a task's options, which a run
// and a session share.
func (f *runFlags) registerOptions(fs *flag.FlagSet) {
	fs.StringVar(&f.opts.Image, "image", "", "image to run in (default: the language's)")
	fs.StringVar(&f.opts.Runtime, "runtime", "", "OCI runtime: runc, crun or runsc")
	fs.StringVar(&f.opts.Workdir, "workdir", "", "working directory in /workspace")
	fs.Var(&f.memory, "memory", "memory limit, e.g. 256MiB")
	fs.Var(&f.disk, "disk", "size of /workspace and /tmp, e.g. 64MiB")
	fs.Int64Var(&f.cpuMillis, "cpu-millis", 0, "CPU limit, 1000 = one core")
	fs.Int64Var(&f.pids, "pids", 0, "process and thread limit")
	fs.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit, e.g. 10s")
	fs.Var(&f.stdoutBytes, "stdout-bytes", "stdout delivered here, e.g. 64KiB")
	fs.Var(&f.stderrBytes, "stderr-bytes", "stderr delivered here, e.g. 64KiB")
	fs.Var(&f.files, "file", "LOCAL[:PATH] puts a local file at /input/PATH (default its base name); repeatable")
	fs.Var(&f.mounts, "mount", "NAME of an operator folder to mount at /mnt/NAME; repeatable")
	fs.Var(&f.env, "env", "KEY=VALUE for the program's environment; repeatable")
	fs.Var(&f.seed, "seed", "seed for SANDBOX_SEED, Python's random and numpy")
	fs.Var(&f.allowHosts, "allow-host", "HOST[:PORTS] or CIDR[:PORTS] the program may connect to, within what the operator permits (ports default to 80,443); repeatable")
	fs.StringVar(&f.netPolicy, "network-policy", "", "an operator's named network policy for the program")
	fs.Var(&f.secrets, "secret", "an operator's secret (--egress-secrets) the egress gateway adds to the program's HTTPS requests to its hosts; the program holds SANDBOXD_SECRET_<NAME> (repeatable)")
	fs.StringVar((*string)(&f.opts.Interpreter), "interpreter", "", "fresh or prestarted: a Python program's interpreter (default: pre-started when a pooled one fits)")
}

// request builds the task from the flags and arguments.
func (f *runFlags) request(fs *flag.FlagSet) (run.Request, error) {
	opts, err := f.options()
	if err != nil {
		return run.Request{}, err
	}
	if f.code != "" && f.lang == "" {
		return run.Request{}, badUsage("-c needs --lang: the code's language (python, bash, sh, javascript, ...; sandboxd images lists them)")
	}
	switch {
	case f.lang != "":
		code := f.code
		if code == "" {
			if fs.NArg() != 1 {
				return run.Request{}, errors.New("with --lang, give the code with -c or one file of code")
			}
			b, err := os.ReadFile(fs.Arg(0))
			if err != nil {
				return run.Request{}, err
			}
			code = string(b)
		} else if fs.NArg() > 0 {
			return run.Request{}, fmt.Errorf("unexpected arguments %q after -c", fs.Args())
		}
		return run.Request{Program: &run.Program{Language: f.lang, Code: code}, Options: opts}, nil
	case f.shell != "":
		if fs.NArg() > 0 {
			return run.Request{}, fmt.Errorf("unexpected arguments %q after --sh", fs.Args())
		}
		return run.Request{Command: &run.Command{Shell: f.shell}, Options: opts}, nil
	case fs.NArg() > 0:
		return run.Request{Command: &run.Command{Argv: fs.Args()}, Options: opts}, nil
	}
	return run.Request{}, badUsage("nothing to run: give --lang and -c or a file, --sh, or a command's argv")
}

// options builds the request's options from the flags.
func (f *runFlags) options() (run.Options, error) {
	opts := f.opts
	opts.Limits = limits.Limits{
		MemoryBytes: int64(f.memory), CPUMillis: f.cpuMillis, Pids: f.pids, Timeout: f.timeout,
		StdoutBytes: int64(f.stdoutBytes), StderrBytes: int64(f.stderrBytes), DiskBytes: int64(f.disk),
	}
	opts.Mounts = f.mounts
	opts.Seed = f.seed.v
	if len(f.allowHosts) > 0 || f.netPolicy != "" || len(f.secrets) > 0 {
		opts.Network = netpolicy.Request{Mode: netpolicy.AllowList, Policy: f.netPolicy, Rules: f.allowHosts, Secrets: f.secrets}
	}
	for _, spec := range f.files {
		local, dest, ok := strings.Cut(spec, ":")
		if !ok {
			dest = filepath.Base(local)
		}
		b, err := os.ReadFile(local)
		if err != nil {
			return run.Options{}, err
		}
		st, err := os.Stat(local)
		if err != nil {
			return run.Options{}, err
		}
		opts.Files = append(opts.Files, run.File{Path: dest, Content: b, Executable: st.Mode()&0o111 != 0})
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return run.Options{}, fmt.Errorf("--env %q is not KEY=VALUE", kv)
		}
		if opts.Env == nil {
			opts.Env = map[string]string{}
		}
		opts.Env[k] = v
	}
	if f.stdin {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return run.Options{}, err
		}
		opts.Stdin = b
	}
	return opts, nil
}

// terminal writes a run's output to this process's, or its events as the
// API's JSON lines.
type terminal struct {
	stdout, stderr io.Writer
	json           bool
}

func (t *terminal) Started(s run.Started) error {
	if !t.json {
		return nil
	}
	return t.line(server.StartedJSON(s))
}

// Network prints an allow-listed run's network events among the JSON
// lines; the terminal's status line counts them.
func (t *terminal) Network(ev run.NetworkEvent) error {
	if !t.json {
		return nil
	}
	return t.line(server.NetworkJSON(ev))
}

func (t *terminal) Output(s run.Stream, p []byte) error {
	switch {
	case t.json:
		return t.line(server.OutputJSON(s, p))
	case s == run.Stderr:
		_, err := t.stderr.Write(p)
		return err
	}
	_, err := t.stdout.Write(p)
	return err
}

func (t *terminal) line(b []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(t.stdout, "%s\n", b)
	return err
}

// statusLine is the one-line summary printed after a run.
func statusLine(r run.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd: %s: %s", r.Status, r.Message)
	if r.StdoutTruncated {
		fmt.Fprintf(&b, "; stdout truncated to %d of %d bytes", r.Limits.StdoutBytes, r.StdoutTotal)
	}
	if r.StderrTruncated {
		fmt.Fprintf(&b, "; stderr truncated to %d of %d bytes", r.Limits.StderrBytes, r.StderrTotal)
	}
	fmt.Fprintf(&b, " [%s, %v", r.Start, r.Duration.Round(time.Millisecond))
	if r.PeakMemoryBytes > 0 {
		fmt.Fprintf(&b, ", peak memory %.1f MiB", float64(r.PeakMemoryBytes)/(1<<20))
	}
	if n := r.Network; n != nil {
		fmt.Fprintf(&b, ", %d connections, %d refused, %s out, %s in", n.Connections, n.Denied, units.BytesSize(float64(n.BytesOut)), units.BytesSize(float64(n.BytesIn)))
	}
	if c := r.Session; c != nil {
		fmt.Fprintf(&b, ", session %s call %d", c.ID, c.Seq)
	}
	fmt.Fprintf(&b, ", run %s]", r.RunID)
	if r.BundleDigest != "" {
		fmt.Fprintf(&b, "\nsandboxd: bundle %s", r.BundleDigest)
	} else if r.BundleError != "" {
		fmt.Fprintf(&b, "\nsandboxd: no bundle: %s", r.BundleError)
	}
	return b.String()
}

// exitCode is the task's exit code, or a shell-like code for outcomes
// without one.
func exitCode(r run.Result) int {
	switch r.Status {
	case run.StatusOK:
		return 0
	case run.StatusCancelled:
		return 130
	case run.StatusRuntimeError:
		return 125
	}
	if c := r.ExitCode; c > 0 && c < 256 {
		return c
	}
	return 1
}
