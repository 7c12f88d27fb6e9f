package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
)

// runFollow runs the commands that follow a run by its id: attach, logs,
// wait, cancel and runs.
func runFollow(name string) func(args []string, stdout, stderr io.Writer) error {
	return func(args []string, stdout, stderr io.Writer) error {
		var client clientFlags
		var stdoutOffset, stderrOffset int64
		var asJSON, quiet bool
		fs := verbFlags(name, stderr)
		client.register(fs)
		fs.BoolVar(&asJSON, "json", false, "print events and the result as JSON lines")
		fs.BoolVar(&quiet, "q", false, "no status line")
		if name == "attach" {
			fs.Int64Var(&stdoutOffset, "stdout-offset", 0, "bytes of stdout already had: resume after them")
			fs.Int64Var(&stderrOffset, "stderr-offset", 0, "bytes of stderr already had: resume after them")
		}
		pos, err := parseInterspersed(fs, args)
		if err != nil {
			return parseError(fs, err)
		}
		want := 1 // the run's id
		if name == "runs" {
			want = 0
		}
		if len(pos) != want {
			if want == 0 {
				return badUsage("takes no arguments")
			}
			return badUsage("give the run's id (sandboxd runs lists them)")
		}
		c, err := client.dial()
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		term := &terminal{stdout: stdout, stderr: stderr, json: asJSON}
		switch name {
		case "attach", "logs":
			res, err := c.Attach(ctx, pos[0], stdoutOffset, stderrOffset, term)
			if err != nil {
				return err
			}
			if name == "logs" {
				return nil
			}
			return ended(res, asJSON, quiet, stdout, stderr)
		case "wait":
			rn, err := c.Wait(ctx, pos[0])
			if err != nil {
				return err
			}
			if rn.Result == nil {
				return fmt.Errorf("sandboxd failed run %s: %s", rn.ID, rn.Error)
			}
			return ended(*rn.Result, asJSON, quiet, stdout, stderr)
		case "cancel":
			st, err := c.Cancel(ctx, pos[0])
			if err != nil {
				return err
			}
			if st == run.Finished {
				fmt.Fprintf(stderr, "sandboxd: run %s had ended already\n", pos[0])
			}
			return nil
		}
		runs, err := c.ListRuns(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tTENANT\tSTATE\tSTATUS\tSTARTED\tDURATION")
		for _, r := range runs {
			state, status, started, took := "running", "", "", ""
			if r.Started != nil {
				started = r.Started.StartedAt.Local().Format(time.DateTime)
			}
			switch {
			case r.Result != nil:
				state, status, took = "ended", string(r.Result.Status), r.Result.Duration.Round(time.Millisecond).String()
			case r.State == run.Finished:
				state, status = "failed", r.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Tenant, state, status, started, took)
		}
		return tw.Flush()
	}
}
