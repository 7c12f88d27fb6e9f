//go:build integration

package conformance

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task/run"
)

// prestartProbes are programs whose every observable a fresh interpreter
// and a pre-started one must agree on: what the program sees of itself and
// its process, its output, tracebacks, exit codes and signals. What
// docs/prestart.md lists as differences is left out.
var prestartProbes = []struct{ name, code, stdin string }{
	{"Report", `import sys
first = list(globals())
import os, json, signal, threading, atexit, resource, __main__
report = {
    "globals": first, "argv": sys.argv, "orig_argv": sys.orig_argv, "file": __file__,
    "name": __name__, "spec": repr(__spec__), "package": __package__,
    "loader": [type(__loader__).__name__, __loader__.name, __loader__.path], "cached": __cached__,
    "main_is_module": __main__.__dict__ is globals(), "cwd": os.getcwd(), "path": sys.path,
    "flags": repr(sys.flags), "executable": sys.executable, "env": sorted(os.environ.items()),
    "ids": [os.getuid() == os.geteuid() == os.getgid() > 0, os.getgroups()], "leader": os.getsid(0) == os.getpid() == os.getpgrp(),
    "umask": os.umask(0o22), "threads": threading.active_count(),
    "handlers": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP)},
    "limits": {n: resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_AS")},
    "stdio": [sys.stdout.line_buffering, sys.stdout.encoding, sys.stderr.line_buffering, sys.stdin.encoding, sys.getfilesystemencoding()],
    "fds": sorted(os.listdir("/proc/self/fd")),
    "status": [l for l in open("/proc/self/status") if l.split(":")[0] in ("Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "SigBlk", "SigIgn")],
    "input": input(),
}
import numpy, pandas
report["modules"] = sorted(sys.modules)
print(json.dumps(report, indent=1, sort_keys=True))
def later():
    import time
    time.sleep(0.2)
    print("a thread ends before the interpreter")
threading.Thread(target=later).start()
atexit.register(print, "atexit runs last")
class Finalized:
    def __del__(self):
        print("a global is finalized at exit", flush=True)
kept = Finalized()
out = open("/workspace/unflushed.txt", "w")
out.write("written at exit")
`, "a line of input\n"},
	{"Traceback", "import json\ndef f(x):\n    return json.loads(x)\ntry:\n    f('{')\nexcept ValueError as e:\n    raise RuntimeError('wrapped') from e\n", ""},
	{"SystemExit", "import sys\nprint('before')\nsys.exit(3)\n", ""},
	{"SystemExitMessage", "raise SystemExit('a message, and code 1')\n", ""},
	{"KeyboardInterrupt", "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n", ""},
	{"KilledBySignal", "import os, signal\nprint('dying', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n", ""},
	{"SyntaxError", "x = (\n", ""},
}

// prestartProbesJS are prestartProbes' counterparts in JavaScript.
var prestartProbesJS = []struct{ name, code, stdin string }{
	{"Report", `const globals = Object.keys(globalThis).sort()
const fs = require('fs')
const report = {
  globals, argv: process.argv, argv0: process.argv0, execArgv: process.execArgv, execPath: process.execPath,
  main: require.main === module, id: module.id, filename: module.filename, parent: module.parent === null, paths: module.paths,
  cache: Object.keys(require.cache), cwd: process.cwd(), env: Object.entries(process.env).sort(),
  ids: [process.getuid() === process.getgid() && process.getuid() > 0, process.getgroups().map((g) => g === process.getgid())], umask: process.umask(0o22),
  title: process.title, process: Object.keys(process).sort(), exitCode: process.exitCode,
  listeners: ['SIGINT', 'SIGTERM', 'exit', 'uncaughtException'].map((e) => process.listenerCount(e)),
  status: fs.readFileSync('/proc/self/status', 'utf8').split('\n').filter((l) => /^(Groups|Cap|NoNewPrivs|Seccomp|SigBlk|SigIgn)/.test(l)),
  tz: Intl.DateTimeFormat().resolvedOptions().timeZone, locale: Intl.DateTimeFormat().resolvedOptions().locale,
  stdin: fs.readFileSync(0, 'utf8'),
}
console.log(JSON.stringify(report, null, 1))
setTimeout(() => console.log('a timer fires before the end'), 100)
process.on('exit', (code) => console.log('exit handler', code))
`, "a line of input\n"},
	{"Throw", "function f() { return JSON.parse('{') }\nf()\n", ""},
	{"Exit", "console.log('before')\nprocess.exitCode = 4\nsetTimeout(() => process.exit(3), 10)\n", ""},
	{"UnhandledRejection", "Promise.reject(new RangeError('nobody waits'))\n", ""},
	{"KilledBySignal", "console.log('dying')\nprocess.kill(process.pid, 'SIGTERM')\nsetTimeout(() => {}, 1000)\n", ""},
	{"SyntaxError", "let x = (\n", ""},
}

// nodeRunnerFrames are the frames below a Node.js main module's, which
// name the pre-starter rather than Node's runner (docs/prestart.md).
var nodeRunnerFrames = regexp.MustCompile(`(?m)(    at Function\.executeUserEntryPoint.*\n)(    at .*\n)*`)

// prestartGroup runs the cases whose programs an interpreter's start
// could change in pre-started interpreters; then the probes in a fresh
// interpreter and in a pre-started one, both in pooled containers, and
// compares all they show. The cases run first: each starts a service of
// its own, whose start reaps what runs in the test backend's cgroups, the
// probes' pool included.
func prestartGroup() grouped {
	return group[*suite]{"Prestart", func(t *testing.T, target Target) *suite {
		return &suite{target: target, warm: true, prestart: true, catalog: withNode(t)}
	}, []kase[*suite]{
		{"TimeoutKillsBusyLoop", OCIRuntime, testTimeout},
		{"CancelKillsWithinOneSecond", OCIRuntime, testCancel},
		{"InitIsClosedToTheProgram", OCIRuntime, testInitIsClosed},
		{"InitSurvivesTheProgramsSignals", OCIRuntime, testInitSurvivesSignals},
		{"EndKillsLeftoversAndKeepsLastWrites", OCIRuntime, testEndKillsLeftovers},
		{"SameProgramTwiceSameReproduciblePart", OCIRuntime, testSameProgramTwice},
		{"LoaderVariablesGetAFreshInterpreter", Logic, testLoaderVariables},
		{"FreshAndPrestartedAgree", Logic, testPrestartProbes},
	}}
}

// testLoaderVariables is the fourth review's finding: a run with
// LD_PRELOAD set ran in a pre-started interpreter, and the preload never
// happened. What the dynamic loader reads before main must reach a fresh
// interpreter: the loader's word on a library it cannot load shows it ran.
func testLoaderVariables(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	for _, lang := range []string{"python", "javascript"} {
		code := map[string]string{"python": "print('ran')", "javascript": "console.log('ran')"}[lang]
		req := python(code, limits.Limits{Timeout: 30 * time.Second})
		req.Program.Language = lang
		req.Options.Env = map[string]string{"LD_PRELOAD": "/nonexistent/libsandboxd-review.so"}
		obs := &observer{}
		res := s.run(t, svc, req, obs)
		s.noContainerOfRun(t, res.RunID)
		if obs.started == nil || obs.started.Prestarted {
			t.Errorf("%s with LD_PRELOAD ran in a pre-started interpreter", lang)
		}
		stderr := string(obs.output(run.Stderr))
		if res.Status != run.StatusOK || string(obs.output(run.Stdout)) != "ran\n" || !strings.Contains(stderr, "libsandboxd-review.so") {
			t.Errorf("%s with LD_PRELOAD: %s, stdout %q, stderr %q; want the loader's word on the library", lang, res.Status, obs.output(run.Stdout), stderr)
		}
	}
}

// testPrestartProbes runs each probe in a fresh interpreter and in a
// pre-started one, and compares what they show.
func testPrestartProbes(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	type probe struct {
		language, name, code, stdin string
	}
	var probes []probe
	for _, p := range prestartProbes {
		probes = append(probes, probe{"python", p.name, p.code, p.stdin})
	}
	for _, p := range prestartProbesJS {
		probes = append(probes, probe{"javascript", "JS" + p.name, p.code, p.stdin})
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			type seen struct {
				res            run.Result
				stdout, stderr string
			}
			var got [2]seen
			for i, interp := range []run.Interpreter{run.InterpreterFresh, run.InterpreterAny} {
				req := python(p.code, limits.Limits{Timeout: 30 * time.Second})
				req.Program.Language, req.Options.Interpreter = p.language, interp
				if p.stdin != "" {
					req.Options.Stdin = []byte(p.stdin)
				}
				obs := &observer{}
				res := s.run(t, svc, req, obs)
				if pre := obs.started != nil && obs.started.Prestarted; pre != (interp == run.InterpreterAny) {
					t.Fatalf("interpreter %q: pre-started %v (cold: %s)", interp, pre, res.ColdReason)
				}
				stderr := nodeRunnerFrames.ReplaceAllString(string(obs.output(run.Stderr)), "$1")
				got[i] = seen{res, string(obs.output(run.Stdout)), stderr}
				s.noContainerOfRun(t, res.RunID)
			}
			fresh, pre := got[0], got[1]
			if fresh.res.Status != pre.res.Status || fresh.res.ExitCode != pre.res.ExitCode || fresh.res.Signal != pre.res.Signal {
				t.Errorf("fresh: %s %d signal %d; pre-started: %s %d signal %d", fresh.res.Status, fresh.res.ExitCode, fresh.res.Signal, pre.res.Status, pre.res.ExitCode, pre.res.Signal)
			}
			if fresh.stdout != pre.stdout {
				t.Errorf("stdout differs:\n%s", diff(fresh.stdout, pre.stdout))
			}
			if fresh.stderr != pre.stderr {
				t.Errorf("stderr differs:\n%s", diff(fresh.stderr, pre.stderr))
			}
			if p.name == "Report" && (fresh.res.Status != run.StatusOK || !strings.Contains(fresh.stdout, "atexit runs last")) ||
				p.name == "JSReport" && (fresh.res.Status != run.StatusOK || !strings.Contains(fresh.stdout, "exit handler 0")) {
				t.Errorf("the report did not run to its end: %s (%s), stderr %q", fresh.res.Status, fresh.res.Message, fresh.stderr)
			}
			for _, g := range got {
				if p.name == "Report" && !hasFile(g.res, "unflushed.txt", int64(len("written at exit"))) {
					t.Errorf("a file left open at exit was not flushed: %+v", g.res.Files)
				}
			}
		})
	}
}

// withNode is the catalog of python's, the shell's and Node.js's images.
func withNode(t *testing.T) images.Catalog {
	return builtinOnly(t, "sandboxd/python", "sandboxd/shell", "sandboxd/node")
}

func hasFile(res run.Result, path string, size int64) bool {
	for _, f := range res.Files {
		if f.Path == path && f.Size == size {
			return true
		}
	}
	return false
}

// diff shows where a fresh interpreter's output and a pre-started one's
// part.
func diff(fresh, pre string) string {
	return reproducer.UnifiedDiff(fresh, pre, "fresh", "pre-started", 2, 40)
}
