package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// jsonCase is a line of a judge's cases file.
type jsonCase struct {
	Name           string     `json:"name"`
	Stdin          *string    `json:"stdin"`
	Args           []string   `json:"args"`
	Files          []jsonFile `json:"files"`
	ExpectedStdout *string    `json:"expected_stdout"`
	Compare        string     `json:"compare"`
	Absolute       float64    `json:"absolute"`
	Relative       float64    `json:"relative"`
	Test           string     `json:"test"`
	TimeoutMs      int64      `json:"timeout_ms"`
	MemoryBytes    int64      `json:"memory_bytes"`
}

type jsonFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// readCases reads a JSONL file of cases, one object a line; an error names
// the file and line.
func readCases(name string) ([]judge.Case, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []judge.Case
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var jc jsonCase
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&jc); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		c := judge.Case{Name: jc.Name, Args: jc.Args, Test: jc.Test,
			Compare: judge.Compare{Kind: judge.CompareKind(jc.Compare), Absolute: jc.Absolute, Relative: jc.Relative},
			Limits:  limits.Limits{Timeout: time.Duration(jc.TimeoutMs) * time.Millisecond, MemoryBytes: jc.MemoryBytes}}
		if c.Compare.Kind == "lines" {
			c.Compare.Kind = judge.CompareLines
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("%s:%d", filepath.Base(name), n)
		}
		if jc.Stdin != nil {
			c.Stdin = []byte(*jc.Stdin)
		}
		if jc.ExpectedStdout != nil {
			c.Expected = []byte(*jc.ExpectedStdout)
		}
		for _, f := range jc.Files {
			c.Files = append(c.Files, run.File{Path: f.Path, Content: []byte(f.Content)})
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", name)
	}
	return cases, nil
}

// runJudge is `sandboxd judge`.
func runJudge(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	var f runFlags
	fs := verbFlags("judge", stderr)
	c.register(fs)
	casesFile := fs.String("cases", "", "the JSONL file of cases, one a line (docs/judge.md)")
	lang := fs.String("lang", "", "the submissions' language (sandboxd images lists them)")
	checker := fs.String("checker", "", "a checker program's FILE, for cases that compare by checker")
	checkerLang := fs.String("checker-lang", "python", "the checker's language")
	stop := fs.Bool("stop-on-failure", false, "skip a submission's cases after its first failure")
	isolation := fs.String("isolation", "fresh", "fresh: each case in a sandbox of its own; shared: all of a submission's cases in one, one after another")
	key := fs.String("idempotency-key", "", "a key per submission, KEY-N for the Nth: a retry gets the first judgements")
	asJSON := fs.Bool("json", false, "print each judgement as a JSON line instead of the table")
	fs.StringVar(&f.opts.Image, "image", "", "image to run in (default: the language's)")
	fs.StringVar(&f.opts.Runtime, "runtime", "", "OCI runtime: runc, crun or runsc")
	fs.Var(&f.memory, "memory", "each case's memory limit, e.g. 256MiB")
	fs.DurationVar(&f.timeout, "timeout", 0, "each case's wall-clock limit, e.g. 2s")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseError(fs, err)
	}
	switch {
	case len(pos) == 0:
		return badUsage("give the files of the submissions to judge")
	case *casesFile == "":
		return badUsage("give the cases with --cases FILE.jsonl")
	case *lang == "":
		return badUsage("give the submissions' language with --lang")
	}
	cases, err := readCases(*casesFile)
	if err != nil {
		return err
	}
	var chk *judge.Checker
	if *checker != "" {
		b, err := os.ReadFile(*checker)
		if err != nil {
			return err
		}
		chk = &judge.Checker{Language: *checkerLang, Code: string(b)}
	}
	subs := make([]judge.Submission, 0, len(pos))
	for i, p := range pos {
		code, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := judge.Submission{ID: p, Language: *lang, Code: string(code), Cases: cases, Checker: chk, Image: f.opts.Image,
			Runtime: f.opts.Runtime, Limits: limits.Limits{MemoryBytes: int64(f.memory), Timeout: f.timeout}, StopOnFailure: *stop, Isolation: judge.Isolation(*isolation)}
		if *key != "" {
			s.IdempotencyKey = fmt.Sprintf("%s-%d", *key, i+1)
		}
		subs = append(subs, s)
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	enc := json.NewEncoder(stdout)
	start := time.Now()
	out, err := cl.Evaluate(ctx, subs, client.EvaluateEvents{Judged: func(j client.Judged) {
		switch {
		case *asJSON && j.Err != nil:
			_ = enc.Encode(map[string]string{"submission_id": j.SubmissionID, "error": j.Err.Error()})
		case *asJSON:
			if b, err := server.JudgementJSON(j.Judgement); err == nil {
				fmt.Fprintf(stdout, "%s\n", b)
			}
		case j.Err != nil:
			fmt.Fprintf(stderr, "%s: not judged: %v\n", printable(j.SubmissionID, false), j.Err)
		}
	}})
	if err != nil {
		return err
	}
	if !*asJSON {
		printJudgements(stdout, out, time.Since(start))
	}
	return judgeExit(out)
}

// printJudgements prints the batch's table: a line a submission, and the
// first failing case's reason.
func printJudgements(w io.Writer, out []client.Judged, took time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBMISSION\tVERDICT\tPASSED\tTIME\tWHY")
	cases := 0
	for _, o := range out {
		v := printable(o.SubmissionID, false)
		if o.Err != nil {
			fmt.Fprintf(tw, "%s\tNOT JUDGED\t-\t-\t%s\n", v, printable(o.Err.Error(), false))
			continue
		}
		j := o.Judgement
		cases += len(j.Cases)
		why := ""
		if j.FirstFailing >= 0 {
			c := j.Cases[j.FirstFailing]
			why = fmt.Sprintf("case %d (%s): %s", c.Index+1, printable(c.Name, false), printable(c.Message, false))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.2fs\t%s\n", v, j.Verdict, j.Passed, len(j.Cases), j.Duration.Seconds(), why)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d submissions, %d cases in %.1fs (%.1f cases/s)\n", len(out), cases, took.Seconds(), float64(cases)/took.Seconds())
	fmt.Fprintln(w, "bundles (sandboxd replay BUNDLE judges one again):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range out {
		switch {
		case o.Err != nil:
		case o.Judgement.BundleDigest == "":
			fmt.Fprintf(tw, "  %s\tnone: %s\n", printable(o.SubmissionID, false), printable(o.Judgement.BundleError, false))
		default:
			fmt.Fprintf(tw, "  %s\t%s\n", printable(o.SubmissionID, false), o.Judgement.BundleDigest)
		}
	}
	tw.Flush()
}

// judgeExit is 0 when every submission was accepted, 1 when some were
// judged and not accepted, 3 when some could not be judged (a
// SANDBOX_ERROR, or refused): retry those, reward none of them.
func judgeExit(out []client.Judged) error {
	code := 0
	for _, o := range out {
		switch {
		case o.Err != nil || o.Judgement.Verdict == judge.SandboxError:
			return exitError{3}
		case o.Judgement.Verdict != judge.Accepted:
			code = 1
		}
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}
