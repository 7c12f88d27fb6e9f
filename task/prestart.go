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

// startupVars are, per language that can be pre-started, the variables
// its interpreter reads as it starts (or its image's start-up code, or a
// module it may pre-load, as it loads): exact names, then prefixes. A
// program whose value differs needs a fresh interpreter.
var startupVars = map[string]struct{ names, prefixes []string }{
	// sitecustomize seeds random from SANDBOX_SEED; numpy, pandas and
	// BLAS read their own on import (OMP_NUM_THREADS follows the CPU).
	"python": {
		names:    []string{"LANG", "LANGUAGE", "HOME", "PATH", "TZ", "SANDBOX_SEED"},
		prefixes: []string{"PYTHON", "LC_", "NPY_", "NUMPY_", "PANDAS_", "OPENBLAS_", "GOTO", "OMP_", "MKL_", "BLIS_"},
	},
	// NODE_OPTIONS and NODE_PATH are read at start, the locale and time
	// zone when ICU and V8 start.
	"javascript": {
		names:    []string{"LANG", "LANGUAGE", "HOME", "PATH", "TZ", "SANDBOX_SEED"},
		prefixes: []string{"NODE_", "LC_", "UV_", "ICU_"},
	},
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
		if _, ok := startupVars[lang.Name]; ok && len(lang.Command) == 2 && lang.Compile == nil {
			return &runtime.Prestart{Language: lang.Name, Interpreter: lang.Command[0], Modules: recipe.Preimport}
		}
	}
	return nil
}

// startupEnv is the environment a pooled container's interpreter starts
// with: a program's with the default limits and no request variables.
func (s *Service) startupEnv(img runtime.Image, egress bool) map[string]string {
	proxy := ""
	if egress {
		proxy = s.ex.ProxyURL()
	}
	return exec.ProgramEnv(img, s.cfg.Limits.Default, "", proxy, nil)
}

// readAtStart says whether language's interpreter reads the variable key
// as it starts.
func readAtStart(language, key string) bool {
	vars := startupVars[language]
	if slices.Contains(vars.names, key) {
		return true
	}
	return slices.ContainsFunc(vars.prefixes, func(p string) bool { return strings.HasPrefix(key, p) })
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
