package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/task"
)

const sessionUsage = `usage:
  sandboxd session create [--lang python] [--ttl 1h] [--idle-ttl 10m] [flags]
  sandboxd session list
  sandboxd session get ID
  sandboxd session delete ID

A session is one sandbox kept for many calls: sandboxd run --session ID runs
in it, with /workspace, background processes and the Python kernel as the
calls before left them. create prints the session's id.

flags:
`

func runSession(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, sessionUsage)
		return exitError{2}
	}
	var f runFlags
	var ttl, idleTTL time.Duration
	var asJSON bool
	fs := flag.NewFlagSet("session "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sessionUsage)
		fs.PrintDefaults()
	}
	f.client.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print the session as JSON")
	if args[0] == "create" {
		fs.StringVar(&f.lang, "lang", "", "the session's language: python gets a persistent kernel")
		f.registerOptions(fs)
		fs.DurationVar(&ttl, "ttl", 0, "end the session this long after its creation (default: the operator's maximum)")
		fs.DurationVar(&idleTTL, "idle-ttl", 0, "end the session this long after its last call (default: the operator's maximum)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return parseError(err)
	}
	wantArgs := map[string]int{"create": 0, "list": 0, "get": 1, "delete": 1}
	n, ok := wantArgs[args[0]]
	if !ok || fs.NArg() != n {
		fs.Usage()
		return exitError{2}
	}
	client, err := f.client.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx := context.Background()
	var infos []task.SessionInfo
	switch args[0] {
	case "create":
		opts, err := f.options()
		if err != nil {
			return err
		}
		info, err := client.CreateSession(ctx, task.SessionRequest{Language: f.lang, Options: opts, TTL: ttl, IdleTTL: idleTTL})
		if err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintln(stdout, info.ID)
			return nil
		}
		infos = []task.SessionInfo{info}
	case "list":
		if infos, err = client.ListSessions(ctx); err != nil {
			return err
		}
	case "get", "delete":
		call := client.GetSession
		if args[0] == "delete" {
			call = client.DeleteSession
		}
		info, err := call(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		infos = []task.SessionInfo{info}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, i := range infos {
			if err := enc.Encode(i); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tRUNTIME\tCALLS\tIDLE EXPIRES\tREASON")
	for _, i := range infos {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", i.ID, i.State, i.Image, i.Runtime, i.Calls, i.IdleExpiresAt.Local().Format(time.TimeOnly), i.Reason)
	}
	return tw.Flush()
}
