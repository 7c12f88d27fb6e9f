//go:build integration

package conformance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// program is one language's programs for the smoke test.
type program struct {
	// hello prints "hello 1.414" (the square root of 2, which asks a C
	// program for the maths library); fail exits 3; spin prints "start"
	// and never ends; write leaves "hi" in /workspace/out.txt.
	hello, fail, spin, write string
	// broken does not compile, for a compiled language.
	broken string
}

var programs = map[string]program{
	"python": {
		hello: "import math\nprint('hello %.3f' % math.sqrt(2))",
		fail:  "raise SystemExit(3)",
		spin:  "print('start', flush=True)\nwhile True: pass",
		write: "open('/workspace/out.txt', 'w').write('hi')",
	},
	"bash": {
		hello: "echo hello 1.414", fail: "exit 3",
		spin:  "echo start; while :; do :; done",
		write: "echo -n hi > /workspace/out.txt",
	},
	"sh": {
		hello: "echo hello 1.414", fail: "exit 3",
		spin:  "echo start; while :; do :; done",
		write: "printf hi > /workspace/out.txt",
	},
	"javascript": {
		hello: "console.log(`hello ${Math.sqrt(2).toFixed(3)}`)",
		fail:  "process.exit(3)",
		spin:  "console.log('start')\nfor (;;) {}",
		write: "require('fs').writeFileSync('/workspace/out.txt', 'hi')",
	},
	"typescript": {
		hello:  "const root: number = Math.sqrt(2)\nconsole.log(`hello ${root.toFixed(3)}`)",
		fail:   "process.exit(3)",
		spin:   "console.log('start')\nfor (;;) {}",
		write:  "import * as fs from 'fs'\nfs.writeFileSync('/workspace/out.txt', 'hi')",
		broken: "const x: number = ;",
	},
	"c": {
		hello:  "#include <math.h>\n#include <stdio.h>\nint main(void) { volatile double two = 2; printf(\"hello %.3f\\n\", sqrt(two)); return 0; }",
		fail:   "int main(void) { return 3; }",
		spin:   "#include <stdio.h>\nint main(void) { puts(\"start\"); fflush(stdout); for (;;); }",
		write:  "#include <stdio.h>\nint main(void) { FILE *f = fopen(\"/workspace/out.txt\", \"w\"); fputs(\"hi\", f); return fclose(f); }",
		broken: "int main(void) { return 0 }",
	},
	"cpp": {
		hello:  "#include <cmath>\n#include <iomanip>\n#include <iostream>\nint main() { volatile double two = 2; std::cout << \"hello \" << std::fixed << std::setprecision(3) << std::sqrt(two) << std::endl; }",
		fail:   "int main() { return 3; }",
		spin:   "#include <iostream>\nint main() { std::cout << \"start\" << std::endl; for (;;); }",
		write:  "#include <fstream>\nint main() { std::ofstream(\"/workspace/out.txt\") << \"hi\"; }",
		broken: "int main() { std::vector<int> v; }",
	},
}

// languageGroup runs each language of the built-in catalog: hello, a
// program that fails, one past its timeout, one that leaves a file and,
// for a compiled language, one that does not compile, which never runs.
// The languages run side by side (as many as go test's -parallel), from
// the pool, but not asserted warm: two languages share each image's one
// pooled container. What tells languages apart (images, compile steps,
// the init's word on them) depends on the kernel the program sees, not on
// the backend nor on runc against crun.
func languageGroup() grouped {
	var cases []kase[*langEnv]
	for _, l := range images.Default().Languages {
		cases = append(cases, kase[*langEnv]{l.Name, Kernel, func(t *testing.T, e *langEnv) { testLanguage(t, e, l) }})
	}
	return group[*langEnv]{"Languages", func(t *testing.T, target Target) *langEnv {
		s := &suite{target: target, catalog: images.Default()}
		return &langEnv{s, s.service(t, func(cfg *task.Config) { cfg.PoolSize = 1 })}
	}, cases}
}

// langEnv is the languages' service.
type langEnv struct {
	s   *suite
	svc *task.Service
}

func testLanguage(t *testing.T, e *langEnv, l images.Language) {
	t.Parallel()
	s, svc := e.s, e.svc
	p, ok := programs[l.Name]
	if !ok {
		t.Fatalf("language %s has no programs in the smoke test", l.Name)
	}
	req := func(code string, timeout time.Duration) run.Request {
		return run.Request{Program: &run.Program{Language: l.Name, Code: code}, Options: run.Options{Limits: limits.Limits{Timeout: timeout}}}
	}
	obs := &observer{}
	if res := s.run(t, svc, req(p.hello, 0), obs); res.Status != run.StatusOK || string(obs.output(run.Stdout)) != "hello 1.414\n" {
		t.Errorf("hello: %s (%s), stdout %q, stderr %q", res.Status, res.Message, obs.output(run.Stdout), obs.output(run.Stderr))
	}
	if res := s.run(t, svc, req(p.fail, 0), nil); res.Status != run.StatusNonzeroExit || res.ExitCode != 3 {
		t.Errorf("a failing program: %s %d (%s), want NONZERO_EXIT 3", res.Status, res.ExitCode, res.Message)
	}
	// Long enough for a compiler under gVisor: the program must
	// have started before the timeout ends it.
	obs = &observer{}
	if res := s.run(t, svc, req(p.spin, 8*time.Second), obs); res.Status != run.StatusTimeout || !strings.HasPrefix(string(obs.output(run.Stdout)), "start") {
		t.Errorf("a program past its timeout: %s (%s), stdout %q, stderr %q; want TIMEOUT after it started", res.Status, res.Message, obs.output(run.Stdout), obs.output(run.Stderr))
	}
	res := s.run(t, svc, req(p.write, 0), nil)
	if res.Status != run.StatusOK || !slices.ContainsFunc(res.Files, func(f artifacts.Output) bool { return f.Path == "out.txt" && f.Size == 2 }) {
		t.Errorf("a program that writes a file: %s (%s), files %+v", res.Status, res.Message, res.Files)
	}
	if l.Compile == nil {
		return
	}
	obs = &observer{}
	res = s.run(t, svc, req(p.broken, 0), obs)
	if res.Status != run.StatusCompileError || res.ExitCode == 0 || !strings.Contains(string(obs.output(run.Stderr)), "main.") || len(obs.output(run.Stdout)) != 0 {
		t.Errorf("a program that does not compile: %s %d (%s), stdout %q, stderr %q; want COMPILE_ERROR with the compiler's diagnostics", res.Status, res.ExitCode, res.Message, obs.output(run.Stdout), obs.output(run.Stderr))
	}
}
