package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// processVerbs are the session verbs on its background processes, and
// the arguments each takes before its command.
var processVerbs = map[string][2]int{"shell": {1, 1}, "start": {1, 1}, "ps": {1, 1}, "logs": {2, 2}, "kill": {2, 2}, "port": {2, 2}, "ports": {1, 1}}

// defaultShell is what session shell starts without a command: bash
// where the image has it.
var defaultShell = []string{"/bin/sh", "-c", "command -v bash >/dev/null && exec bash -i; exec sh -i"}

// runProcessVerb runs a session verb on background processes.
func runProcessVerb(verb string, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var env stringsFlag
	fs := flag.NewFlagSet("session "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sessionUsage)
		fs.PrintDefaults()
	}
	cf.register(fs)
	workdir := fs.String("workdir", "", "shell, start: the working directory in /workspace (default: the session's)")
	fs.Var(&env, "env", "shell, start: KEY=VALUE over the session's environment; repeatable")
	tty := fs.Bool("tty", term.IsTerminal(int(os.Stdin.Fd())), "shell: give the command a terminal (default: when stdin is one)")
	follow := fs.Bool("follow", false, "logs: go on printing what comes until the process ends")
	sig := fs.Int("signal", int(syscall.SIGTERM), "kill: the signal's number")
	closePort := fs.Bool("close", false, "port: close the port instead of opening it")
	// The command comes after --, flags before it.
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	n := processVerbs[verb]
	switch {
	case len(pos) < n[0] || len(pos) > n[1]:
		return badUsage("session %s takes %d arguments before --, not %d", verb, n[0], len(pos))
	case verb == "start" && len(command) == 0:
		return badUsage("session start needs a command after --")
	case verb != "shell" && verb != "start" && len(command) > 0:
		return badUsage("session %s takes no command", verb)
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--env %q is not KEY=VALUE", kv)
		}
		vars[k] = v
	}
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	id := pos[0]
	switch verb {
	case "shell":
		if len(command) == 0 {
			command = defaultShell
		}
		return shell(ctx, c, session.ProcessRequest{SessionID: id, Command: run.Command{Argv: command}, Env: vars, Workdir: *workdir}, *tty, stdout, stderr)
	case "start":
		p, err := c.StartProcess(ctx, session.ProcessRequest{SessionID: id, Command: run.Command{Argv: command}, Env: vars, Workdir: *workdir})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, p.ID)
		return nil
	case "ps":
		list, err := c.ListProcesses(ctx, id)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tSTARTED\tOUTPUT\tCOMMAND")
		for _, p := range list {
			exit := ""
			if p.State != session.Running {
				exit = strconv.Itoa(p.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", p.ID, p.State, exit, p.StartedAt.Local().Format(time.TimeOnly),
				p.StdoutBytes+p.StderrBytes, printable(strings.Join(p.Argv, " "), false))
		}
		return tw.Flush()
	case "port":
		port, err := strconv.Atoi(pos[1])
		if err != nil {
			return badUsage("session port: %q is not a port number", pos[1])
		}
		if *closePort {
			return c.ClosePort(ctx, id, port)
		}
		p, err := c.OpenPort(ctx, id, port)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, p.URL)
		return nil
	case "ports":
		ports, err := c.ListPorts(ctx, id)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PORT\tOPENED\tURL")
		for _, p := range ports {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", p.Port, p.OpenedAt.Local().Format(time.TimeOnly), p.URL)
		}
		return tw.Flush()
	case "kill":
		p, err := c.SignalProcess(ctx, id, pos[1], *sig)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "sent signal %d to %s (%s)\n", *sig, p.ID, p.State)
		return nil
	}
	return logs(ctx, c, id, pos[1], *follow, stdout, stderr)
}

// logs prints what a process wrote that the daemon keeps, and with
// follow what comes after, until it ends.
func logs(ctx context.Context, c *client.Client, sid, pid string, follow bool, stdout, stderr io.Writer) error {
	if !follow {
		o, err := c.ReadProcessOutput(ctx, sid, pid, session.Offsets{}, 0, 0)
		if err != nil {
			return err
		}
		if o.Start.Stdout > 0 || o.Start.Stderr > 0 {
			fmt.Fprintf(stderr, "(the first %d bytes of stdout and %d of stderr are no longer kept)\n", o.Start.Stdout, o.Start.Stderr)
		}
		stdout.Write(o.Stdout)
		stderr.Write(o.Stderr)
		return nil
	}
	p, err := c.AttachProcess(ctx, sid, pid, session.Offsets{})
	if err != nil {
		return err
	}
	if err := p.CloseSend(); err != nil {
		return err
	}
	info, err := p.Copy(stdout, stderr, func(n int64) { fmt.Fprintf(stderr, "(%d bytes no longer kept)\n", n) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s %s with %d\n", info.ID, strings.ToLower(string(info.State)), info.ExitCode)
	return nil
}

// shell starts a command in a session and is its terminal, as ssh is: in
// raw mode, resized with the local terminal, until the command ends,
// whose exit code it exits with. Without a terminal it copies stdin,
// stdout and stderr.
func shell(ctx context.Context, c *client.Client, req session.ProcessRequest, tty bool, stdout, stderr io.Writer) error {
	in := int(os.Stdin.Fd())
	if tty {
		req.Terminal = &session.Terminal{Rows: 24, Cols: 80, Term: os.Getenv("TERM")}
		if cols, rows, err := term.GetSize(in); err == nil {
			req.Terminal.Rows, req.Terminal.Cols = uint16(rows), uint16(cols)
		}
	}
	p, err := c.StartProcess(ctx, req)
	if err != nil {
		return err
	}
	stream, err := c.AttachProcess(ctx, req.SessionID, p.ID, session.Offsets{})
	if err != nil {
		return err
	}
	if tty && term.IsTerminal(in) {
		state, err := term.MakeRaw(in)
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(in, state)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if cols, rows, err := term.GetSize(in); err == nil {
					stream.Resize(uint16(rows), uint16(cols))
				}
			}
		}()
	}
	go func() {
		// Ctrl-C and the like are bytes to the remote terminal in raw
		// mode; without a terminal, the end of stdin is the end of the
		// command's.
		if _, err := io.Copy(stream, os.Stdin); err == nil || errors.Is(err, io.EOF) {
			stream.CloseStdin()
		}
	}()
	info, err := stream.Copy(stdout, stderr, nil)
	if err != nil {
		return err
	}
	if info.ExitCode != 0 {
		return exitError{info.ExitCode}
	}
	return nil
}
