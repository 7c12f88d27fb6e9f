package task

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/run"
)

// Pre-started interpreters (docs/prestart.md): a pooled container of an
// image with Python or JavaScript starts the interpreter ahead of its
// task, with the recipe's preimport modules loaded, and a program that
// would start exactly that interpreter runs in it instead.

// lateVars are, per language that can be pre-started, the variables known
// not to be read as its interpreter starts: not by the dynamic loader
// (LD_*), libc (GLIBC_TUNABLES, MALLOC_*), the interpreter, the image's
// start-up code, nor a module the pool's interpreters may pre-load. A
// program whose environment differs from the pooled interpreter's in any
// other variable needs a fresh interpreter: what is read before main
// cannot be set after (the fourth review's LD_PRELOAD never happened in a
// pre-started interpreter). It is an allow-list so that a variable no one
// thought of is on the safe side.
var lateVars = map[string][]string{
	"python":     commonLateVars,
	"javascript": slices.Concat(commonLateVars, []string{"PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "MPLBACKEND", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}),
}

// commonLateVars are read by neither interpreter as it starts: names of
// the task's user, the build date, the egress proxy and the tool channel
// (read when a request or the library needs them), and the shell's own.
var commonLateVars = []string{
	"USER", "LOGNAME", "SOURCE_DATE_EPOCH",
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "PIP_PROXY",
	"SANDBOXD_TOOLS_FD", "TERM", "COLUMNS", "LINES", "PWD", "OLDPWD", "SHLVL",
}

// prestartOf is the interpreter an image pre-starts: that of the first
// language of its recipe that can be pre-started, with its preimport
// modules; nil when it has none.
func (s *Service) prestartOf(imageName string) *runtime.Prestart {
	recipe, ok := s.Catalog().Recipe(imageName)
	if !ok {
		return nil
	}
	for _, lang := range recipe.Languages {
		if _, ok := lateVars[lang.Name]; ok && len(lang.Command) == 2 && lang.Compile == nil {
			return &runtime.Prestart{Language: lang.Name, Interpreter: lang.Command[0], Modules: recipe.Preimport}
		}
	}
	return nil
}

// startupEnv is the environment a pooled container's interpreter starts
// with: a program's with the default limits and no request variables.
func (s *Service) startupEnv(img runtime.Image, egress bool) map[string]string {
	var vars map[string]string
	if egress {
		vars = s.ex.EgressEnv()
	}
	return exec.ProgramEnv(img, s.cfg.Limits.Default, "", vars, nil)
}

// readAtStart says whether language's interpreter may read the variable
// key as it starts: every one but its lateVars.
func readAtStart(language, key string) bool {
	return !slices.Contains(lateVars[language], key)
}

// prestartMemoryFloor is the lowest memory limit a pooled container with
// a pre-started interpreter takes (numpy and pandas take ~45 MiB); a run
// with less gets a container of its own.
const prestartMemoryFloor = 128 << 20

// pooledInterpreter is the interpreter the pool's containers of
// imageName pre-start, or nil when they start none.
func (s *Service) pooledInterpreter(imageName string) *runtime.Prestart {
	if !s.cfg.Prestart {
		return nil
	}
	return s.prestartOf(imageName)
}

// chooseInterpreter decides, before the run claims a pooled container,
// where its program runs, and says why the pool cannot serve it when the
// choice rules its pooled containers out. A request that asks for a
// pre-started interpreter it cannot have is refused.
func (s *Service) chooseInterpreter(j exec.Job) (exec.Interpreter, string, error) {
	mode := j.Request.Options.Interpreter
	offer := s.prestartOf(j.ImageName)
	why := runsInInterpreter(j.Request, j.Plan, offer)
	if offer != nil && (why != "" || !loadsAny(offer.Language, j.Request.Program.Code, offer.Modules)) {
		offer.Modules = nil
	}
	if len(j.Plan.Tools) > 0 {
		// The tool channel is set up as the program starts.
		return exec.Interpreter{}, "", nil
	}
	if mode == run.InterpreterPrestarted && why != "" {
		return exec.Interpreter{}, "", run.Invalid("interpreter", "%s", why)
	}
	if s.pooledInterpreter(j.ImageName) == nil {
		c := exec.Interpreter{Prestart: offer, InCold: mode == run.InterpreterPrestarted}
		if c.InCold {
			return c, "the pool's containers have no pre-started interpreter", nil
		}
		return c, "", nil
	}
	// The pool's containers of this image hold an interpreter, which a
	// container's memory limit cannot be lowered below.
	lim, def := j.Plan.Limits, s.cfg.Limits.Default
	if lim.MemoryBytes < prestartMemoryFloor {
		return exec.Interpreter{Prestart: offer, InCold: mode == run.InterpreterPrestarted},
			fmt.Sprintf("the request's memory limit is below %d MiB, which the pool's containers may use for their pre-started interpreter", prestartMemoryFloor>>20), nil
	}
	if why == "" {
		why = fitsPool(offer.Language, s.ex.Env(j.Image, j.Plan, j.Request.Options.Env), s.startupEnv(j.Image, j.Plan.Network.Mode == netpolicy.AllowList), lim, def)
	}
	switch {
	case mode == run.InterpreterFresh:
		return exec.Interpreter{Prestart: offer}, "", nil
	case why == "":
		return exec.Interpreter{Prestart: offer, InWarm: true, InCold: mode == run.InterpreterPrestarted}, "", nil
	case mode == run.InterpreterPrestarted:
		return exec.Interpreter{Prestart: offer, InCold: true}, why, nil
	}
	return exec.Interpreter{Prestart: offer}, "", nil
}

// runsInInterpreter says why req's program cannot run in offer, or "".
func runsInInterpreter(req run.Request, p exec.Plan, offer *runtime.Prestart) string {
	switch {
	case offer == nil:
		return fmt.Sprintf("image %s has no interpreter to pre-start", p.Image)
	case req.Program == nil:
		return "a command runs as given, never in a pre-started interpreter"
	case p.Language.Name != offer.Language || len(p.Argv) != 2 || p.Argv[0] != offer.Interpreter || p.Language.Compile != nil:
		return fmt.Sprintf("%s programs do not run in the pre-started %s", p.Language.Name, offer.Interpreter)
	}
	return ""
}

// fitsPool says why a program with env and limits lim cannot run in a
// pooled container's interpreter, started with startup and limits def,
// or "".
func fitsPool(language string, env, startup map[string]string, lim, def limits.Limits) string {
	switch {
	case lim.MemoryBytes < def.MemoryBytes:
		// What the interpreter imported would take from what the
		// program may use, more than from the default.
		return "the request's memory limit is below the pool's, whose pre-started interpreter's modules would take from it"
	case lim.Pids != def.Pids:
		return "the request's pids limit differs from the pool's, which the pre-started interpreter has"
	}
	for _, vars := range []map[string]string{env, startup} {
		for k := range vars {
			if readAtStart(language, k) && env[k] != startup[k] {
				return fmt.Sprintf("%s differs from the pre-started interpreter's, which read it as it started", k)
			}
		}
	}
	return ""
}

// loadsAny says whether a program in language, code, loads one of
// modules, as far as its text shows: a Python import or from line, a
// JavaScript require or import of the package. A program that loads one
// another way runs all the same, loading it itself.
func loadsAny(language, code string, modules []string) bool {
	var loaded []string
	switch language {
	case "python":
		for _, m := range pythonImport.FindAllStringSubmatch(code, -1) {
			names := strings.Split(m[1], ",")
			if m[2] != "" {
				names = []string{m[2]}
			}
			for _, n := range names {
				if f := strings.Fields(n); len(f) > 0 {
					top, _, _ := strings.Cut(f[0], ".")
					loaded = append(loaded, top)
				}
			}
		}
	case "javascript":
		for _, m := range jsImport.FindAllStringSubmatch(code, -1) {
			loaded = append(loaded, m[1])
		}
	}
	return slices.ContainsFunc(modules, func(m string) bool {
		if language == "python" {
			m, _, _ = strings.Cut(m, ".")
		}
		return slices.Contains(loaded, m)
	})
}

// pythonImport is an import line (the names, as written) or a from line
// (the module); jsImport the package a require or an import names.
var (
	pythonImport = regexp.MustCompile(`(?m)^[ \t]*(?:import[ \t]+([\w., \t]+)|from[ \t]+([\w.]+))`)
	jsImport     = regexp.MustCompile(`(?:require\(\s*|from\s+|import\s+)['"]((?:@[^'"/]+/)?[^'"/]+)`)
)
