package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/netpolicy"

	"github.com/moby/sys/atomicwriter"
	"github.com/sandboxd/sandboxd/task/session"
)

const sessionUsage = `usage:
  sandboxd session create [--lang python] [--ttl 1h] [--idle-ttl 10m] [flags]
  sandboxd session list
  sandboxd session get ID
  sandboxd session delete ID
  sandboxd session pause ID                   save it to disk and free its container (gVisor, direct backend)
  sandboxd session resume ID                  restore a paused one: variables, processes, files
  sandboxd session upload ID LOCAL [PATH]     a file into /workspace (PATH: its base name)
  sandboxd session download ID PATH [-o FILE] a file of /workspace (to stdout without -o)
  sandboxd session files ID [PATH]            what /workspace holds
  sandboxd session fork BUNDLE                a new session holding what that call left
  sandboxd session network ID [--allow-host H]... [--network-policy P] [--secret S]... | --none
                                              change its allow-list while it lives
  sandboxd session shell ID [-- CMD...]       a terminal in the session, as ssh gives (default: bash)
  sandboxd session start ID -- CMD...         a background process; prints its id
  sandboxd session ps ID                      its background processes
  sandboxd session logs ID PID [--follow]     what one wrote (and writes, until it ends)
  sandboxd session kill ID PID [--signal N]   a signal to one's process group (default SIGTERM)
  sandboxd session port ID PORT [--close]     open a port to the inbound proxy; prints its URL
  sandboxd session ports ID                   the ports open

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
	if _, ok := processVerbs[args[0]]; ok {
		return runProcessVerb(args[0], args[1:], stdout, stderr)
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
	out := fs.String("o", "", "download: the file to write (default stdout)")
	var noNetwork bool
	if args[0] == "network" {
		fs.Var(&f.allowHosts, "allow-host", "HOST[:PORTS] or CIDR[:PORTS] the session may connect to from now on (repeatable)")
		fs.StringVar(&f.netPolicy, "network-policy", "", "an operator's named network policy for the session from now on")
		fs.Var(&f.secrets, "secret", "an operator's secret the gateway adds to the session's HTTPS requests from now on (repeatable)")
		fs.BoolVar(&noNetwork, "none", false, "take every rule away: connections under way are cut, new ones refused")
	}
	if args[0] == "create" {
		fs.StringVar(&f.lang, "lang", "", "the session's language: python gets a persistent kernel")
		f.registerOptions(fs)
		fs.DurationVar(&ttl, "ttl", 0, "end the session this long after its creation (default: the operator's maximum)")
		fs.DurationVar(&idleTTL, "idle-ttl", 0, "end the session this long after its last call (default: the operator's maximum)")
	}
	// Flags may come after the arguments too: session download ID PATH -o FILE.
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	argRange := map[string][2]int{"create": {0, 0}, "list": {0, 0}, "get": {1, 1}, "delete": {1, 1}, "pause": {1, 1}, "resume": {1, 1}, "upload": {2, 3}, "download": {2, 2}, "files": {1, 2}, "fork": {1, 1}, "network": {1, 1}}
	n, ok := argRange[args[0]]
	switch {
	case !ok:
		return badUsage("unknown subcommand %q", args[0])
	case len(pos) < n[0] || len(pos) > n[1]:
		want := fmt.Sprint(n[0])
		if n[1] > n[0] {
			want = fmt.Sprintf("%d to %d", n[0], n[1])
		}
		return badUsage("session %s takes %s arguments, not %d", args[0], want, len(pos))
	}
	client, err := f.client.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx := context.Background()
	var infos []session.Info
	switch args[0] {
	case "upload", "download", "files":
		return sessionFiles(ctx, client, args[0], pos, *out, stdout, stderr)
	case "fork":
		info, fork, err := client.ForkSession(ctx, pos[0])
		if err != nil {
			return err
		}
		for _, w := range fork.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		if !fork.Reproduced {
			fmt.Fprintf(stderr, "warning: call %d of the chain did not reproduce: the fork holds what the replay made\n", fork.FirstDiffering)
		}
		if !asJSON {
			fmt.Fprintln(stdout, info.ID)
			return nil
		}
		infos = []session.Info{info}
	case "create":
		opts, err := f.options()
		if err != nil {
			return err
		}
		info, err := client.CreateSession(ctx, session.Request{Language: f.lang, Options: opts, TTL: ttl, IdleTTL: idleTTL})
		if err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintln(stdout, info.ID)
			return nil
		}
		infos = []session.Info{info}
	case "network":
		n := netpolicy.Request{Mode: netpolicy.AllowList, Policy: f.netPolicy, Rules: f.allowHosts, Secrets: f.secrets}
		if noNetwork {
			if n.Policy != "" || len(n.Rules) > 0 || len(n.Secrets) > 0 {
				return badUsage("--none takes no --allow-host, --network-policy or --secret")
			}
			n = netpolicy.Request{Mode: netpolicy.None}
		}
		info, err := client.UpdateSessionNetwork(ctx, pos[0], n)
		if err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintf(stdout, "%s allows %s\n", info.ID, describePolicy(info.Network))
			return nil
		}
		infos = []session.Info{info}
	case "list":
		if infos, err = client.ListSessions(ctx); err != nil {
			return err
		}
	case "get", "delete", "pause", "resume":
		call := map[string]func(context.Context, string) (session.Info, error){
			"get": client.GetSession, "delete": client.DeleteSession, "pause": client.PauseSession, "resume": client.ResumeSession,
		}[args[0]]
		info, err := call(ctx, pos[0])
		if err != nil {
			return err
		}
		infos = []session.Info{info}
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

// describePolicy is a policy in force, in the command-line form of its
// rules.
func describePolicy(p netpolicy.Policy) string {
	if len(p.Rules) == 0 {
		return "nothing"
	}
	rules := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = r.String()
	}
	out := strings.Join(rules, ", ")
	if len(p.Secrets) > 0 {
		out += ", adding the secrets " + strings.Join(p.Secrets, ", ")
	}
	return out
}

// sessionFiles moves files in and out of a session's /workspace.
func sessionFiles(ctx context.Context, client *client.Client, verb string, args []string, out string, stdout, stderr io.Writer) error {
	id := args[0]
	switch verb {
	case "upload":
		local := args[1]
		dest := filepath.Base(local)
		if len(args) == 3 {
			dest = args[2]
		}
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		info, err := client.UploadFile(ctx, id, dest, st.Mode()&0o111 != 0, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "uploaded /workspace/%s (%d bytes, sha256 %s)\n", info.Path, info.Size, info.SHA256)
		return nil
	case "download":
		rc, err := client.ReadFile(ctx, id, args[1])
		if err != nil {
			return err
		}
		defer rc.Close()
		if out == "" {
			_, err = io.Copy(stdout, rc)
			return err
		}
		data, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		return atomicwriter.WriteFile(out, data, 0o644)
	}
	dir := ""
	if len(args) == 2 {
		dir = args[1]
	}
	files, err := client.ListFiles(ctx, id, dir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tTYPE\tSIZE\tSHA256")
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Path, f.Type, f.Size, f.SHA256)
	}
	return tw.Flush()
}
