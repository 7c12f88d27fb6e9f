package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task/tools"
)

// runInspect is `sandboxd inspect BUNDLE`.
func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := verbFlags("inspect", stderr)
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

// printBundle prints what a bundle says ran and came out. Everything in a
// bundle is its author's to choose, the program's output and file names
// among it: every value is printed through printable, which escapes what a
// terminal would act on, and single-line values keep no line breaks that
// could forge a line of this listing.
func printBundle(w io.Writer, rec *reproducer.Recorded) {
	if rec.IsJudgement() {
		printJudgement(w, rec)
		return
	}
	m := rec.Manifest()
	r, run := m.Reproducible, m.Run
	q := r.Request
	v := func(s string) string { return printable(s, false) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	fmt.Fprintf(tw, "bundle\t%s (verified, %d entries, %s)\n", rec.Bundle.Digest, len(r.Entries)+1, size(rec.Bundle.UncompressedBytes))
	fmt.Fprintf(tw, "reproducible\t%s\n", v(run.ReproducibleDigest))
	fmt.Fprintf(tw, "run\t%s on instance %s, sandboxd %s\n", v(run.RunID), v(run.Instance), v(run.Version))
	fmt.Fprintf(tw, "\tstarted %s, ran %.1f ms, queued %.1f ms, peak memory %s\n", run.StartedAt.Format(time.RFC3339Nano), run.DurationMs, run.QueuedMs, size(run.PeakMemoryBytes))
	switch {
	case run.Start == "cold" && run.ColdReason != "":
		fmt.Fprintf(tw, "\tin a cold container: %s\n", v(run.ColdReason))
	case run.Start != "":
		fmt.Fprintf(tw, "\tin a %s container\n", v(run.Start))
	}
	what := "command"
	if q.Kind == "code" {
		what = v(q.Language) + " code"
	}
	fmt.Fprintf(tw, "ran\t%s: %s\n", what, strings.Join(quoteAll(q.Argv), " "))
	switch {
	case q.Prestarted && len(q.Preimported) > 0:
		fmt.Fprintf(tw, "\tin an interpreter pre-started with %s loaded\n", v(strings.Join(q.Preimported, ", ")))
	case q.Prestarted:
		fmt.Fprintf(tw, "\tin a pre-started interpreter\n")
	}
	fmt.Fprintf(tw, "image\t%s %s\n", v(r.Image), v(r.ImageDigest))
	if r.ImageRecipe != "" {
		fmt.Fprintf(tw, "recipe\t%s\n", r.ImageRecipe)
	}
	fmt.Fprintf(tw, "runtime\t%s %s on %s\n", v(r.Runtime.Name), v(r.Runtime.Version), v(r.Backend))
	if r.Seccomp != "" {
		fmt.Fprintf(tw, "seccomp\t%s\n", v(r.Seccomp))
	}
	l := q.Limits
	fmt.Fprintf(tw, "limits\tmemory %s, cpu %dm, pids %d, timeout %v, stdout %s, stderr %s, disk %s\n", size(l.MemoryBytes), l.CPUMillis, l.Pids,
		l.Timeout, size(l.StdoutBytes), size(l.StderrBytes), size(l.DiskBytes))
	printNetwork(tw, q, run.Network, v)
	fmt.Fprintf(tw, "workdir\t%s; mounts: %s; stdin: %v; seed: %s\n", v(q.Workdir), orDash(v(strings.Join(q.Mounts, " "))), q.Stdin, orDash(v(q.Seed)))
	fmt.Fprintf(tw, "determinism\t%s\n", v(sortedPairs(r.Determinism)))
	fmt.Fprintf(tw, "env\t%s\n", v(strings.Join(r.Environment, " ")))
	for _, f := range q.Files {
		fmt.Fprintf(tw, "input\t%s (%s)\n", v(f.Path), size(int64(len(rec.Entries[artifacts.DirInput+"/"+f.Path]))))
	}
	o := r.Outcome
	fmt.Fprintf(tw, "outcome\t%s, exit code %d: %s\n", v(o.Status), o.ExitCode, v(run.Message))
	fmt.Fprintf(tw, "\tstdout %s written (%s kept), stderr %s written (%s kept)\n", size(o.StdoutTotal),
		size(int64(len(rec.Entries[artifacts.EntryStdout]))), size(o.StderrTotal), size(int64(len(rec.Entries[artifacts.EntryStderr]))))
	for _, out := range r.Outputs {
		note := v(out.Type)
		if out.Type == "file" {
			note = fmt.Sprintf("file, %s", size(out.Size))
			if out.SHA256 != "" {
				note += ", sha256 " + v(out.SHA256[:min(16, len(out.SHA256))]) + "..."
			}
		}
		if out.Omitted != "" {
			note += " (not stored: " + v(out.Omitted) + ")"
		}
		fmt.Fprintf(tw, "output\t%s: %s\n", v(out.Path), note)
	}
	if r.OutputsTruncated {
		fmt.Fprintf(tw, "output\t(the listing stopped at its limit)\n")
	}
	printToolCalls(tw, q.Tools, rec.Entries[artifacts.EntryToolCalls], v)
	if rp := rec.Manifest().Run.Replay; rp != nil {
		from := "read from this daemon's store"
		if rp.Supplied {
			from = "sent by the caller"
		}
		fmt.Fprintf(tw, "replay of	%s: %d requests answered from its record (%s), no tool called for them\n", v(rp.Of), len(rp.Answered), from)
	}
	tw.Flush()
	for _, e := range []string{artifacts.EntryStdout, artifacts.EntryStderr} {
		if b := rec.Entries[e]; len(b) > 0 {
			fmt.Fprintf(w, "\n--- %s (first lines)\n%s\n", e, head(b, 10))
		}
	}
}

// printToolCalls lists the program's calls of tools: each its place,
// tool, outcome, time and, when it did not pass, why.
func printToolCalls(w io.Writer, granted []string, record []byte, v func(string) string) {
	if len(granted) == 0 {
		return
	}
	calls, err := tools.ParseRecord(record)
	if err != nil {
		fmt.Fprintf(w, "tools\t%s; the record is unreadable: %v\n", v(strings.Join(granted, " ")), err)
		return
	}
	fmt.Fprintf(w, "tools\t%s; %d requests\n", v(strings.Join(granted, " ")), len(calls))
	for _, c := range calls {
		line := fmt.Sprintf("%s %s: %s", c.Op, orDash(v(c.Tool)), v(c.Outcome))
		if c.Op == "call" && c.Seq > 0 {
			line = fmt.Sprintf("#%d %s (%s risk), %.1f ms", c.Seq, line, orDash(v(string(c.Risk))), c.DurationMillis)
		}
		if c.Error != "" {
			line += ": " + v(c.Error)
		}
		if c.RecordedFrom != "" {
			line += ", answered from the record of " + v(c.RecordedFrom)
		}
		fmt.Fprintf(w, "tool call\t%s\n", line)
	}
}

// head is the first lines of b, safe for a terminal.
func head(b []byte, lines int) string {
	parts := strings.SplitN(printable(string(b), true), "\n", lines+1)
	if len(parts) > lines {
		parts = append(parts[:lines], "...")
	}
	return strings.TrimRight(strings.Join(parts, "\n"), "\n")
}

// quoteAll quotes the arguments a shell would split, and escapes the rest
// for a terminal.
func quoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = printable(a, false)
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$") {
			out[i] = strconv.Quote(a)
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

// printNetwork prints a run's network: its mode, and for an allow-list
// the rules, the caps, the totals and every recorded decision.
func printNetwork(w io.Writer, q artifacts.Request, n *artifacts.Network, v func(string) string) {
	fmt.Fprintf(w, "network\t%s", v(q.Network))
	if q.NetworkPolicy != "" {
		fmt.Fprintf(w, ", policy %s", v(q.NetworkPolicy))
	}
	fmt.Fprintln(w)
	if n == nil {
		return
	}
	rules := make([]string, 0, len(n.Rules))
	for _, r := range n.Rules {
		rules = append(rules, v(r.String()))
	}
	fmt.Fprintf(w, "\tallows %s\n", strings.Join(rules, ", "))
	if c := q.NetworkCaps; c != nil {
		fmt.Fprintf(w, "\tcaps: %s out, %s in, %d connections\n", units.BytesSize(float64(c.BytesOut)), units.BytesSize(float64(c.BytesIn)), c.Connections)
	}
	if len(q.NetworkSecrets) > 0 {
		names := make([]string, len(q.NetworkSecrets))
		for i, s := range q.NetworkSecrets {
			names[i] = v(s)
		}
		fmt.Fprintf(w, "\tsecrets added by the gateway: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(w, "\t%d connections, %d refused, %s out, %s in\n", n.Connections, n.Denied, units.BytesSize(float64(n.BytesOut)), units.BytesSize(float64(n.BytesIn)))
	for _, e := range n.Events {
		decision := "allowed by " + v(e.Rule)
		if !e.Allowed {
			decision = "refused: " + v(e.Reason)
		}
		target := v(e.Name)
		if e.Port != 0 {
			target += fmt.Sprintf(":%d", e.Port)
		}
		if e.Addr != "" {
			target += " (" + v(e.Addr) + ")"
		}
		fmt.Fprintf(w, "\t%s %s %s via %s, %s", e.Time.Format("15:04:05.000"), v(e.Kind), target, v(e.Via), decision)
		if e.BytesOut > 0 || e.BytesIn > 0 {
			fmt.Fprintf(w, "; %d bytes out, %d in", e.BytesOut, e.BytesIn)
		}
		if len(e.Secrets) > 0 {
			names := make([]string, len(e.Secrets))
			for i, s := range e.Secrets {
				names[i] = v(s)
			}
			fmt.Fprintf(w, "; %s added to %d requests", strings.Join(names, ", "), e.Injections)
		}
		if e.Masked > 0 {
			fmt.Fprintf(w, ", masked in %d places of the responses", e.Masked)
		}
		fmt.Fprintln(w)
	}
	if n.Dropped > 0 {
		fmt.Fprintf(w, "\t%d more decisions past the log's cap\n", n.Dropped)
	}
}

// printJudgement shows a judgement's bundle: the submission, then a line
// a case with its verdict and why.
func printJudgement(w io.Writer, rec *reproducer.Recorded) {
	m := rec.Manifest()
	r, ran := m.Reproducible, m.Run
	j, q := r.Judgement, r.Request
	v := func(s string) string { return printable(s, false) }
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "bundle\t%s (verified, a judgement of %d cases, %s)\n", rec.Bundle.Digest, len(j.Cases), size(rec.Bundle.UncompressedBytes))
	fmt.Fprintf(tw, "judgement\t%s on instance %s, sandboxd %s, for %s\n", v(ran.RunID), v(ran.Instance), v(ran.Version), v(orDash(ran.Tenant)))
	fmt.Fprintf(tw, "\tstarted %s, took %.1f ms\n", ran.StartedAt.Format(time.RFC3339Nano), ran.DurationMs)
	what := "command: " + strings.Join(quoteAll(q.Argv), " ")
	if q.Language != "" {
		what = v(q.Language) + " code"
	}
	fmt.Fprintf(tw, "judged\t%s, each case in a %s sandbox\n", what, v(j.Isolation))
	fmt.Fprintf(tw, "image\t%s %s\n", v(r.Image), v(r.ImageDigest))
	fmt.Fprintf(tw, "runtime\t%s %s on %s\n", v(r.Runtime.Name), v(r.Runtime.Version), v(r.Backend))
	if c := j.Compile; c != nil {
		fmt.Fprintf(tw, "compile\t%s (ok: %v)\n", strings.Join(quoteAll(c.Argv), " "), c.OK)
	}
	if j.Checker != "" {
		fmt.Fprintf(tw, "checker\t%s code\n", v(j.Checker))
	}
	fmt.Fprintf(tw, "verdict\t%s: %s\n", v(j.Verdict), v(ran.Message))
	for i, c := range j.Cases {
		why := ""
		if judged := ran.Judged; judged != nil && i < len(judged.Cases) {
			why = judged.Cases[i].Message
		}
		fmt.Fprintf(tw, "case %d\t%s %s\t%s\n", i+1, v(c.Verdict), v(c.Name), v(why))
	}
	tw.Flush()
}
