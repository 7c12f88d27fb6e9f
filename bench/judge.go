package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/task/judge"
)

// The judge workload: problems written from templates in Python, C++ and
// JavaScript, each with a correct and a broken solution and its cases,
// judged as one batch at judgeConcurrency, beside the same programs run as
// bare interpreters (chrooted into the same images; C++ compiled by the
// host's g++) in the same run.
const (
	judgeConcurrency = 8
	casesPerProblem  = 4
)

// problem is one problem: its template's solutions and cases.
type problem struct {
	name, language  string
	correct, broken string
	cases           []judge.Case
}

// template is a problem's shape: what it prints for a list of numbers, and
// its solutions, which read n and then n numbers. broken gets a solution
// wrong on every input.
type template struct {
	name   string
	answer func(a []int64, k int64) string
	code   func(lang string, k int64, broken bool) string
}

// reads are the lines that read the list, by language.
var reads = map[string]string{
	"python":     "import sys\nd = sys.stdin.read().split()\nn = int(d[0])\na = [int(x) for x in d[1:1+n]]\n",
	"cpp":        "#include <bits/stdc++.h>\nusing namespace std;\nint main() {\n  long long n; cin >> n; vector<long long> a(n); for (auto &x : a) cin >> x;\n",
	"javascript": "const d = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\nconst n = d[0], a = d.slice(1, 1 + n);\n",
}

func number(lang, py, cpp, js string, broken bool) string {
	plus := ""
	if broken {
		plus = " + 1"
	}
	switch lang {
	case "python":
		return reads[lang] + "print(" + py + plus + ")\n"
	case "cpp":
		return reads[lang] + "  " + cpp + "\n  cout << r" + plus + " << \"\\n\";\n}\n"
	}
	return reads[lang] + "console.log(" + js + plus + ");\n"
}

var templates = []template{
	{"sum times k", func(a []int64, k int64) string { return strconv.FormatInt(sum(a)*k, 10) },
		func(lang string, k int64, broken bool) string {
			return number(lang, fmt.Sprintf("sum(a) * %d", k), fmt.Sprintf("long long r = 0; for (auto x : a) r += x; r *= %d;", k),
				fmt.Sprintf("a.reduce((s, x) => s + x, 0) * %d", k), broken)
		}},
	{"max plus k", func(a []int64, k int64) string { return strconv.FormatInt(slices.Max(a)+k, 10) },
		func(lang string, k int64, broken bool) string {
			return number(lang, fmt.Sprintf("max(a) + %d", k), fmt.Sprintf("long long r = *max_element(a.begin(), a.end()) + %d;", k),
				fmt.Sprintf("Math.max(...a) + %d", k), broken)
		}},
	{"multiples of k", func(a []int64, k int64) string {
		n := 0
		for _, x := range a {
			if x%(k+1) == 0 {
				n++
			}
		}
		return strconv.Itoa(n)
	}, func(lang string, k int64, broken bool) string {
		return number(lang, fmt.Sprintf("sum(1 for x in a if x %% %d == 0)", k+1), fmt.Sprintf("long long r = count_if(a.begin(), a.end(), [](long long x) { return x %% %d == 0; });", k+1),
			fmt.Sprintf("a.filter(x => x %% %d === 0).length", k+1), broken)
	}},
	{"squares mod", func(a []int64, k int64) string {
		var s int64
		for _, x := range a {
			s += x * x
		}
		return strconv.FormatInt(s%(1000+k), 10)
	}, func(lang string, k int64, broken bool) string {
		return number(lang, fmt.Sprintf("sum(x * x for x in a) %% %d", 1000+k), fmt.Sprintf("long long r = 0; for (auto x : a) r += x * x; r %%= %d;", 1000+k),
			fmt.Sprintf("a.reduce((s, x) => s + x * x, 0) %% %d", 1000+k), broken)
	}},
	{"distinct residues", func(a []int64, k int64) string {
		seen := map[int64]bool{}
		for _, x := range a {
			seen[x%(k+2)] = true
		}
		return strconv.Itoa(len(seen))
	}, func(lang string, k int64, broken bool) string {
		return number(lang, fmt.Sprintf("len(set(x %% %d for x in a))", k+2), fmt.Sprintf("set<long long> s; for (auto x : a) s.insert(x %% %d); long long r = s.size();", k+2),
			fmt.Sprintf("new Set(a.map(x => x %% %d)).size", k+2), broken)
	}},
	{"smallest k", func(a []int64, k int64) string {
		s := slices.Sorted(slices.Values(a))
		var out []string
		for _, x := range s[:k] {
			out = append(out, strconv.FormatInt(x, 10))
		}
		return strings.Join(out, " ")
	}, func(lang string, k int64, broken bool) string {
		if broken {
			k++
		}
		switch lang {
		case "python":
			return reads[lang] + fmt.Sprintf("print(*sorted(a)[:%d])\n", k)
		case "cpp":
			return reads[lang] + fmt.Sprintf("  sort(a.begin(), a.end());\n  for (int i = 0; i < %d; i++) cout << a[i] << (i + 1 < %d ? ' ' : '\\n');\n}\n", k, k)
		}
		return reads[lang] + fmt.Sprintf("console.log(a.sort((x, y) => x - y).slice(0, %d).join(' '));\n", k)
	}},
}

func sum(a []int64) int64 {
	var s int64
	for _, x := range a {
		s += x
	}
	return s
}

// judgeProblems writes 6 templates x 6 variants x 3 languages: 108
// problems, with the same cases in each language.
func judgeProblems() []problem {
	rng := rand.New(rand.NewPCG(1, 2))
	var out []problem
	for ti, t := range templates {
		for k := int64(1); k <= 6; k++ {
			var cases []judge.Case
			for c := range casesPerProblem {
				n := 10 + rng.IntN(40)
				a := make([]int64, n)
				var in strings.Builder
				fmt.Fprintf(&in, "%d\n", n)
				for i := range a {
					a[i] = rng.Int64N(1000)
					fmt.Fprintf(&in, "%d ", a[i])
				}
				in.WriteString("\n")
				cases = append(cases, judge.Case{Name: fmt.Sprintf("case %d", c+1), Stdin: []byte(in.String()), Expected: []byte(t.answer(a, k) + "\n")})
			}
			for _, lang := range []string{"python", "cpp", "javascript"} {
				out = append(out, problem{name: fmt.Sprintf("%d.%d %s (%s)", ti+1, k, t.name, lang), language: lang,
					correct: t.code(lang, k, false), broken: t.code(lang, k, true), cases: cases})
			}
		}
	}
	return out
}

// judgeRate is the workload's result, judged and bare, for one language
// or all of them.
type judgeRate struct {
	Language    string  `json:"language"`
	Isolation   string  `json:"isolation"`
	Problems    int     `json:"problems"`
	Submissions int     `json:"submissions"`
	Cases       int     `json:"cases"`
	Concurrency int     `json:"concurrency"`
	Wrong       int     `json:"wrong_verdicts"`
	SandboxErr  int     `json:"sandbox_errors"`
	JudgeS      float64 `json:"judge_seconds"`
	JudgeSubsPS float64 `json:"judge_submissions_per_second"`
	JudgeCasesS float64 `json:"judge_cases_per_second"`
	JudgeCPUMs  float64 `json:"judge_cpu_ms_per_case"`
	BareS       float64 `json:"bare_seconds"`
	BareCasesS  float64 `json:"bare_cases_per_second"`
	BareCPUMs   float64 `json:"bare_cpu_ms_per_case"`
	BareWrong   int     `json:"bare_wrong_outputs"`
	Ratio       float64 `json:"ratio"`
	Backend     string  `json:"backend"`
}

// add is r with o's counts and times added, its rates worked out again.
func (r judgeRate) add(o judgeRate) judgeRate {
	cpuJ, cpuB := r.JudgeCPUMs*float64(r.Cases)+o.JudgeCPUMs*float64(o.Cases), r.BareCPUMs*float64(r.Cases)+o.BareCPUMs*float64(o.Cases)
	r.Problems += o.Problems
	r.Submissions += o.Submissions
	r.Cases += o.Cases
	r.Wrong += o.Wrong
	r.SandboxErr += o.SandboxErr
	r.BareWrong += o.BareWrong
	r.JudgeS += o.JudgeS
	r.BareS += o.BareS
	r.JudgeCPUMs, r.BareCPUMs = cpuJ/float64(r.Cases), cpuB/float64(r.Cases)
	r.rates()
	return r
}

func (r *judgeRate) rates() {
	r.JudgeSubsPS, r.JudgeCasesS = float64(r.Submissions)/r.JudgeS, float64(r.Cases)/r.JudgeS
	r.BareCasesS = float64(r.Cases) / r.BareS
	r.Ratio = r.JudgeCasesS / r.BareCasesS
}

// oneBatch names the row of the whole workload judged as one batch.
const oneBatch = "all, one batch"

// measureJudge judges the workload on d, a language at a time as one
// batch in each isolation, each beside the same programs run bare once;
// then all of it as one batch, fresh, beside the bare runs' sum. It
// reports them all, the sum of each isolation, and the one batch last.
func measureJudge(ctx context.Context, d *daemon, backend string) ([]judgeRate, error) {
	problems := judgeProblems()
	var out []judgeRate
	var all []judge.Submission
	var allWant []judge.Verdict
	totals := map[judge.Isolation]judgeRate{}
	isolations := []judge.Isolation{judge.IsolationFresh, judge.IsolationShared}
	for _, lang := range []string{"python", "javascript", "cpp"} {
		var subs []judge.Submission
		var want []judge.Verdict
		n := 0
		for i, p := range problems {
			if p.language != lang {
				continue
			}
			n++
			for _, good := range []bool{true, false} {
				code, v := p.correct, judge.Accepted
				if !good {
					code, v = p.broken, judge.WrongAnswer
				}
				subs = append(subs, judge.Submission{ID: fmt.Sprintf("%d/%v", i, good), Language: p.language, Code: code, Cases: p.cases})
				want = append(want, v)
			}
		}
		all, allWant = append(all, subs...), append(allWant, want...)
		bare, err := bareJudge(ctx, subs, want)
		if err != nil {
			return nil, fmt.Errorf("%s bare: %w", lang, err)
		}
		for _, iso := range isolations {
			for i := range subs {
				subs[i].Isolation = iso
			}
			r, err := judgeBatch(ctx, d, subs, want)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", lang, iso, err)
			}
			r.Language, r.Isolation, r.Problems, r.Backend = lang, string(iso), n, backend
			r.BareS, r.BareCPUMs, r.BareWrong = bare.seconds, bare.cpuMs/float64(r.Cases), bare.wrong
			r.rates()
			out = append(out, r)
			t, ok := totals[iso]
			if !ok {
				t = judgeRate{Language: "all", Isolation: string(iso), Concurrency: judgeConcurrency, Backend: backend}
			}
			totals[iso] = t.add(r)
		}
	}
	for _, iso := range isolations {
		out = append(out, totals[iso])
	}
	for i := range all {
		all[i].Isolation = judge.IsolationFresh
	}
	r, err := judgeBatch(ctx, d, all, allWant)
	if err != nil {
		return nil, fmt.Errorf("one batch: %w", err)
	}
	sum := totals[judge.IsolationFresh]
	r.Language, r.Isolation, r.Problems, r.Backend = oneBatch, string(judge.IsolationFresh), sum.Problems, backend
	r.BareS, r.BareCPUMs, r.BareWrong = sum.BareS, sum.BareCPUMs, sum.BareWrong
	r.rates()
	return append(out, r), nil
}

// judgeBatch judges subs as one batch on d.
func judgeBatch(ctx context.Context, d *daemon, subs []judge.Submission, want []judge.Verdict) (judgeRate, error) {
	r := judgeRate{Submissions: len(subs), Cases: len(subs) * casesPerProblem, Concurrency: judgeConcurrency}
	cpu0, t0 := hostBusy(), time.Now()
	out, err := d.client.Evaluate(ctx, subs, client.EvaluateEvents{})
	if err != nil {
		return r, err
	}
	r.JudgeS, r.JudgeCPUMs = time.Since(t0).Seconds(), float64((hostBusy()-cpu0).Milliseconds())/float64(r.Cases)
	for i, o := range out {
		switch {
		case o.Err != nil || o.Judgement.Verdict == judge.SandboxError:
			r.SandboxErr++
			fmt.Fprintf(os.Stderr, "judge: %s: %v %s\n", o.SubmissionID, o.Err, o.Judgement.Verdict)
		case o.Judgement.Verdict != want[i]:
			r.Wrong++
			fmt.Fprintf(os.Stderr, "judge: %s: %s, want %s\n", o.SubmissionID, o.Judgement.Verdict, want[i])
		}
	}
	return r, nil
}

type bareResult struct {
	seconds, cpuMs float64
	wrong          int
}

// bareJudge runs every submission's cases as bare interpreters, at the
// same concurrency: python3 and node chrooted into their images' roots,
// C++ compiled once by the host's g++ and run as is; each output compared
// as the judge does.
func bareJudge(ctx context.Context, subs []judge.Submission, want []judge.Verdict) (bareResult, error) {
	store, err := direct.OpenStore(direct.DefaultImageDir)
	if err != nil {
		return bareResult{}, err
	}
	root := func(image string) (string, error) {
		img, err := store.Image(image)
		if err != nil {
			return "", err
		}
		return filepath.Join(direct.DefaultImageDir, strings.TrimPrefix(img.ID, "sha256:"), "rootfs"), nil
	}
	py, err := root("sandboxd/python")
	if err != nil {
		return bareResult{}, err
	}
	node, err := root("sandboxd/node")
	if err != nil {
		return bareResult{}, err
	}
	dir, err := os.MkdirTemp("", "sandboxd-bench-judge-")
	if err != nil {
		return bareResult{}, err
	}
	defer os.RemoveAll(dir)
	var next atomic.Int64
	var wrong atomic.Int64
	var firstErr error
	var once sync.Once
	cpu0, t0 := hostBusy(), time.Now()
	var wg sync.WaitGroup
	for range judgeConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(subs) || ctx.Err() != nil {
					return
				}
				s := subs[i]
				var argv []string
				switch s.Language {
				case "python":
					argv = []string{"chroot", py, "python3", "-c", s.Code}
				case "javascript":
					argv = []string{"chroot", node, "node", "-e", s.Code}
				case "cpp":
					bin := filepath.Join(dir, strconv.Itoa(i))
					cc := exec.CommandContext(ctx, "g++", "-std=gnu++17", "-O2", "-o", bin, "-x", "c++", "-")
					cc.Stdin = strings.NewReader(s.Code)
					if out, err := cc.CombinedOutput(); err != nil {
						once.Do(func() { firstErr = fmt.Errorf("g++: %v: %s", err, out) })
						return
					}
					argv = []string{bin}
				}
				accepted := true
				for _, c := range s.Cases {
					cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
					cmd.Stdin, cmd.Stderr = bytes.NewReader(c.Stdin), io.Discard
					got, err := cmd.Output()
					if err != nil {
						once.Do(func() { firstErr = fmt.Errorf("%s: %v", s.ID, err) })
						return
					}
					if ok, _ := judge.Match(c.Compare, got, c.Expected); !ok {
						accepted = false
					}
				}
				if accepted != (want[i] == judge.Accepted) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return bareResult{seconds: time.Since(t0).Seconds(), cpuMs: float64((hostBusy() - cpu0).Milliseconds()), wrong: int(wrong.Load())}, firstErr
}

// reportJudge prints the workload's results.
func reportJudge(w io.Writer, rs []judgeRate) {
	if len(rs) == 0 {
		return
	}
	all := rs[len(rs)-1]
	fmt.Fprintf(w, "\njudge workload: %d problems (Python, JavaScript, C++), %d submissions, %d cases, concurrency %d, %s:\n"+
		"a batch a language in each isolation, their sums, and all of it as one batch (fresh) beside the bare runs' sum\n\n",
		all.Problems, all.Submissions, all.Cases, all.Concurrency, all.Backend)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "language\tisolation\tsubmissions/s\tcases/s\tCPU ms/case\tbare cases/s\tbare CPU ms/case\tjudged/bare\twrong\tSANDBOX_ERROR\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2fx\t%d\t%d\t\n", r.Language, r.Isolation, r.JudgeSubsPS, r.JudgeCasesS, r.JudgeCPUMs,
			r.BareCasesS, r.BareCPUMs, r.Ratio, r.Wrong+r.BareWrong, r.SandboxErr)
	}
	tw.Flush()
}

// judgeTargets are the workload's targets: every verdict right in every
// batch, and the rate of the whole workload judged as one batch in the
// default isolation, fresh.
func judgeTargets(rs []judgeRate) []target {
	if len(rs) == 0 || rs[len(rs)-1].Language != oneBatch {
		return nil
	}
	r := rs[len(rs)-1]
	wrong, sandbox, subs := 0, 0, 0
	for _, b := range rs {
		if b.Language != "all" {
			wrong, sandbox, subs = wrong+b.Wrong+b.BareWrong, sandbox+b.SandboxErr, subs+b.Submissions
		}
	}
	return []target{
		{What: "judge workload: every verdict right, 0 SANDBOX_ERROR", Result: fmt.Sprintf("%d wrong, %d SANDBOX_ERROR of %d submissions judged", wrong, sandbox, subs),
			Met: wrong == 0 && sandbox == 0},
		{What: "judge workload as one batch: cases/s >= 0.5x the bare interpreters' (" + r.Backend + ")", Result: fmt.Sprintf("%.1f vs %.1f cases/s: %.2fx", r.JudgeCasesS, r.BareCasesS, r.Ratio),
			Met: r.Ratio >= 0.5},
	}
}
