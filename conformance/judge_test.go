//go:build integration

package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/judge"
)

// judgeGroup judges submissions on real sandboxes: each built-in
// language's sum of two numbers, right and wrong, and hostile
// submissions whose verdicts a runtime reports (OOM, pids, timeouts,
// floods), each in a batch whose other submissions it must not touch.
func judgeGroup() grouped {
	return group[*judgeEnv]{"Judge", func(t *testing.T, target Target) *judgeEnv {
		s := &suite{target: target, catalog: images.Default()}
		return &judgeEnv{s, s.service(t, func(cfg *task.Config) { cfg.MaxSessions = 8 })}
	}, []kase[*judgeEnv]{
		{"Languages", Logic, testJudgeLanguages},
		{"HostileSubmissions", OCIRuntime, testJudgeHostile},
		{"SharedSandbox", Logic, testJudgeShared},
	}}
}

// extraGroup judges the languages of the recipes in images/extra (Java,
// Go, Rust), which the set-up builds for the tests: a right and a wrong
// answer, a compile error, a time limit and an OOM each.
func extraGroup() grouped {
	return group[*judgeEnv]{"JudgeExtraLanguages", func(t *testing.T, target Target) *judgeEnv {
		catalog, err := images.WithDir("../images/extra")
		if err != nil {
			t.Fatal(err)
		}
		s := &suite{target: target, catalog: catalog}
		return &judgeEnv{s, s.service(t, nil)}
	}, []kase[*judgeEnv]{{"Verdicts", Logic, testJudgeExtra}}}
}

// extras are each extra language's programs: the sum, a compile error, a
// loop, and one that takes 256 MiB a MiB at a time.
var extras = map[string]struct{ sum, broken, loop, memory string }{
	"java": {
		sum:    "import java.util.*;\npublic class Main { public static void main(String[] a) { Scanner s = new Scanner(System.in); long x = s.nextLong(), y = s.nextLong(); System.out.println(x + y); } }",
		broken: "public class Main { public static void main(String[] a) { int x = } }",
		loop:   "public class Main { public static void main(String[] a) { long n = 0; while (true) n++; } }",
		memory: "import java.util.*;\npublic class Main { public static void main(String[] a) { List<byte[]> l = new ArrayList<>(); for (int i = 0; i < 256; i++) { byte[] b = new byte[1 << 20]; Arrays.fill(b, (byte) 1); l.add(b); } System.out.println(l.size()); } }",
	},
	"go": {
		sum:    "package main\n\nimport \"fmt\"\n\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }",
		broken: "package main\n\nfunc main() { x := }",
		loop:   "package main\n\nfunc main() { for {} }",
		memory: "package main\n\nimport \"fmt\"\n\nfunc main() { var l [][]byte; for i := 0; i < 256; i++ { b := make([]byte, 1<<20); for j := range b { b[j] = 1 }; l = append(l, b) }; fmt.Println(len(l)) }",
	},
	"rust": {
		sum:    "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!(\"{}\", v[0] + v[1]); }",
		broken: "fn main() { let x: i32 = ; }",
		loop:   "fn main() { loop {} }",
		memory: "fn main() { let mut l = Vec::new(); for _ in 0..256 { l.push(vec![1u8; 1 << 20]); } println!(\"{}\", l.iter().map(|v| v[4095] as usize).sum::<usize>()); }",
	},
}

func testJudgeExtra(t *testing.T, e *judgeEnv) {
	lim := limits.Limits{MemoryBytes: 128 << 20, Timeout: 10 * time.Second}
	var subs []judge.Submission
	want := map[string]judge.Verdict{}
	for lang, p := range extras {
		add := func(kind, code string, v judge.Verdict) {
			id := lang + " " + kind
			subs = append(subs, judge.Submission{ID: id, Language: lang, Code: code, Cases: sumCases(), Limits: lim, StopOnFailure: true})
			want[id] = v
		}
		add("sum", p.sum, judge.Accepted)
		plus := map[string]string{"java": "x + y", "go": "a + b", "rust": "v[0] + v[1]"}[lang]
		wrong := strings.Replace(p.sum, plus, strings.Replace(plus, "+", "-", 1), 1)
		if wrong == p.sum {
			t.Fatalf("%s: the sum has no %q to make wrong", lang, plus)
		}
		add("wrong", wrong, judge.WrongAnswer)
		add("broken", p.broken, judge.CompileError)
		add("loop", p.loop, judge.TimeLimit)
		add("memory", p.memory, judge.MemoryLimit)
	}
	// 1 GiB of garbage, 1 MiB at a time, within 128 MiB: the JVM's heap
	// grows with the live data, not up to the limit before collecting.
	garbage := "public class Main { public static void main(String[] a) { java.util.Scanner s = new java.util.Scanner(System.in); long x = s.nextLong(), y = s.nextLong(); long k = 0; for (int i = 0; i < 1024; i++) { byte[] b = new byte[1 << 20]; b[i] = 1; k += b[i]; } System.out.println(x + y + k - 1024); } }"
	subs = append(subs, judge.Submission{ID: "java garbage", Language: "java", Code: garbage, Cases: sumCases(), Limits: lim})
	want["java garbage"] = judge.Accepted
	for _, j := range e.evaluate(t, subs...) {
		if j.Verdict != want[j.SubmissionID] {
			t.Errorf("%s: %s, want %s; %s", j.SubmissionID, j.Verdict, want[j.SubmissionID], describe(j))
		}
	}
}

// judgeEnv is the judge's service.
type judgeEnv struct {
	s   *suite
	svc *task.Service
}

// sums are each language's sum of the two numbers on stdin, right.
var sums = map[string]string{
	"python":     "a, b = map(int, input().split())\nprint(a + b)",
	"bash":       "read a b\necho $((a + b))",
	"sh":         "read a b\necho $((a + b))",
	"javascript": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number)\nconsole.log(a + b)",
	"typescript": "import * as fs from 'fs'\nconst [a, b]: number[] = fs.readFileSync(0, 'utf8').trim().split(' ').map(Number)\nconsole.log(a + b)",
	"c":          "#include <stdio.h>\nint main(void) { long a, b; scanf(\"%ld %ld\", &a, &b); printf(\"%ld\\n\", a + b); }",
	"cpp":        "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }",
}

func (e *judgeEnv) evaluate(t *testing.T, subs ...judge.Submission) []judge.Judgement {
	t.Helper()
	ctx, cancel := context.WithTimeout(access.WithCaller(context.Background(), access.Operator), 3*time.Minute)
	defer cancel()
	slots := e.svc.EvaluateSlots()
	out := make([]judge.Judgement, len(subs))
	errs := make(chan error, len(subs))
	for i, sub := range subs {
		go func() {
			var err error
			out[i], err = e.svc.Evaluate(ctx, sub, task.EvaluateOptions{Slots: slots})
			errs <- err
		}()
	}
	for range subs {
		if err := <-errs; err != nil {
			t.Fatalf("Evaluate: %v", err)
		}
	}
	return out
}

func sumCases() []judge.Case {
	return []judge.Case{
		{Name: "small", Stdin: []byte("1 2\n"), Expected: []byte("3\n")},
		{Name: "large", Stdin: []byte("1000000000 2000000000\n"), Expected: []byte("3000000000\n")},
	}
}

func testJudgeLanguages(t *testing.T, e *judgeEnv) {
	var subs []judge.Submission
	for _, l := range images.Default().Languages {
		code, ok := sums[l.Name]
		if !ok {
			t.Fatalf("language %s has no sum in the judge's test", l.Name)
		}
		subs = append(subs, judge.Submission{ID: l.Name, Language: l.Name, Code: code, Cases: sumCases()},
			judge.Submission{ID: l.Name + " wrong", Language: l.Name, Code: strings.Replace(code, "a + b", "a - b", 1), Cases: sumCases()})
		if p := programs[l.Name]; p.broken != "" {
			subs = append(subs, judge.Submission{ID: l.Name + " broken", Language: l.Name, Code: p.broken, Cases: sumCases()})
		}
	}
	for i, j := range e.evaluate(t, subs...) {
		want := judge.Accepted
		switch {
		case strings.HasSuffix(subs[i].ID, " wrong"):
			want = judge.WrongAnswer
		case strings.HasSuffix(subs[i].ID, " broken"):
			want = judge.CompileError
		}
		if j.Verdict != want {
			t.Errorf("%s: %s (%+v), want %s", subs[i].ID, j.Verdict, j.Cases, want)
		}
		if want == judge.CompileError && (j.Compile == nil || j.Compile.OK || len(j.Compile.Stderr) == 0) {
			t.Errorf("%s: compile %+v, want the compiler's diagnostics", subs[i].ID, j.Compile)
		}
		if j.BundleDigest == "" {
			t.Errorf("%s: no bundle (%s)", subs[i].ID, j.BundleError)
		}
	}
}

// testJudgeHostile judges, in one batch, a fork bomb, a program that runs
// out of memory, one that floods stdout, one that never ends, and one that
// writes where the next case reads, beside a sound submission: each gets
// its verdict, the sound one is accepted, and no case sees another's
// files.
func testJudgeHostile(t *testing.T, e *judgeEnv) {
	lim := limits.Limits{MemoryBytes: 64 << 20, Pids: 32, Timeout: 5 * time.Second, StdoutBytes: 64 << 10}
	py := func(id, code string, cases ...judge.Case) judge.Submission {
		if cases == nil {
			cases = sumCases()
		}
		return judge.Submission{ID: id, Language: "python", Code: code, Cases: cases, Limits: lim}
	}
	trespass := "import os\nif os.path.exists('/workspace/left') or os.path.exists('/tmp/left'):\n    print('found')\nelse:\n    print('clean')\nopen('/workspace/left', 'w').write('x')\nopen('/tmp/left', 'w').write('x')"
	clean := []judge.Case{{Name: "first", Expected: []byte("clean\n")}, {Name: "second", Expected: []byte("clean\n")}}
	subs := []judge.Submission{
		py("sound", sums["python"]),
		py("fork bomb", "import os\nwhile True:\n    os.fork()"),
		py("memory", "x = bytearray(256 << 20)\nprint(len(x))"),
		py("flood", "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)"),
		py("forever", "while True: pass"),
		py("trespass", trespass, clean...),
	}
	want := map[string][]judge.Verdict{
		"sound":    {judge.Accepted},
		"memory":   {judge.MemoryLimit},
		"flood":    {judge.OutputLimit},
		"forever":  {judge.TimeLimit},
		"trespass": {judge.Accepted},
		// The pids limit makes fork fail (an error, which ends it), or the
		// bomb runs until its timeout; under gVisor its 32 interpreters
		// meet the memory limit first.
		"fork bomb": {judge.RuntimeError, judge.TimeLimit, judge.MemoryLimit},
	}
	for i, j := range e.evaluate(t, subs...) {
		id := subs[i].ID
		ok := false
		for _, w := range want[id] {
			ok = ok || j.Verdict == w
		}
		if !ok {
			t.Errorf("%s: %s, want one of %v; cases %s", id, j.Verdict, want[id], describe(j))
		}
	}
}

func describe(j judge.Judgement) string {
	var b strings.Builder
	for _, c := range j.Cases {
		fmt.Fprintf(&b, "[%s %s: %s] ", c.Name, c.Verdict, c.Message)
	}
	return b.String()
}

// testJudgeShared judges a submission's cases in one sandbox: one after
// another, the second finding what the first left, as the isolation says.
func testJudgeShared(t *testing.T, e *judgeEnv) {
	trespass := "import os\nprint('found' if os.path.exists('/workspace/left') else 'clean')\nopen('/workspace/left', 'w').write('x')"
	cases := []judge.Case{{Name: "first", Expected: []byte("clean\n")}, {Name: "second", Expected: []byte("found\n")}}
	subs := []judge.Submission{
		{ID: "shared", Language: "python", Code: trespass, Cases: cases, Isolation: judge.IsolationShared},
		{ID: "sum", Language: "cpp", Code: sums["cpp"], Cases: sumCases(), Isolation: judge.IsolationShared},
		{ID: "test", Language: "python", Code: "def add(a, b):\n    return a + b", Isolation: judge.IsolationShared,
			Cases: []judge.Case{{Test: "assert add(1, 2) == 3"}, {Test: "assert add(1, 2) == 4"}}},
	}
	out := e.evaluate(t, subs...)
	if j := out[0]; j.Verdict != judge.Accepted || j.Isolation != judge.IsolationShared {
		t.Errorf("shared: %s in %q (%s), want ACCEPTED in a shared sandbox: the second case finds the first's file", j.Verdict, j.Isolation, describe(j))
	}
	if j := out[1]; j.Verdict != judge.Accepted || j.Compile == nil || !j.Compile.OK {
		t.Errorf("a compiled language in a shared sandbox: %s (%s)", j.Verdict, describe(j))
	}
	if j := out[2]; j.Cases[0].Verdict != judge.Accepted || j.Cases[1].Verdict != judge.WrongAnswer {
		t.Errorf("tests in a shared sandbox: %s", describe(j))
	}
	for _, i := range e.svc.ListSessions(access.WithCaller(context.Background(), access.Operator)) {
		if i.State == "ACTIVE" {
			t.Errorf("the shared sandbox %s outlived its judgement", i.ID)
		}
	}
}
