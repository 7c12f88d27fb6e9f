package task

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestPrestartedInterpreters follows a Python program to the interpreter
// it runs in: the pool's, pre-started with the recipe's modules, when it
// fits; a fresh one in the same pooled container when the request sets
// what the interpreter read as it started; a container of its own below
// the memory floor; and one started for it when a replay asks.
func TestPrestartedInterpreters(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 1, func(c *Config) { c.Prestart = true })
	for _, spec := range rt.Specs() {
		t.Fatalf("a container ran before any task: %+v", spec)
	}
	numpy := code("import os, numpy as np\nprint(1)")
	for _, tc := range []struct {
		name       string
		req        run.Request
		warm       bool
		prestarted bool
		cold       string // in the cold reason
		modules    []string
	}{
		{"fits", run.Request{Program: code("print(1)")}, true, true, "", nil},
		{"loads a module the image pre-loads", run.Request{Program: numpy}, true, true, "", []string{"numpy", "pandas"}},
		{"a cold one asked for, loading a module", run.Request{Program: numpy, Options: run.Options{Interpreter: run.InterpreterPrestarted, Limits: limits.Limits{Pids: 50}}}, false, true, "pids limit differs", []string{"numpy", "pandas"}},
		{"a variable Python reads as it starts", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"PYTHONHASHSEED": "7"}}}, true, false, "", nil},
		{"a seed, read by sitecustomize", run.Request{Program: code("print(1)"), Options: run.Options{Seed: new(uint64)}}, true, false, "", nil},
		{"a variable it is not known not to read", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"MY_TOKEN": "x"}}}, true, false, "", nil},
		{"the dynamic loader's variable", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}}}, true, false, "", nil},
		{"a variable it does not read as it starts", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"USER": "me"}}}, true, true, "", nil},
		{"less memory than the pool's", run.Request{Program: code("print(1)"), Options: run.Options{Limits: limits.Limits{MemoryBytes: 256 << 20}}}, true, false, "", nil},
		{"asked for fresh", run.Request{Program: code("print(1)"), Options: run.Options{Interpreter: run.InterpreterFresh}}, true, false, "", nil},
		{"a command", run.Request{Command: &run.Command{Argv: []string{"python3", "-c", "print(1)"}}}, true, false, "", nil},
		{"below the memory floor", run.Request{Program: code("print(1)"), Options: run.Options{Limits: limits.Limits{MemoryBytes: 64 << 20}}}, false, false, "below 128 MiB", nil},
		{"a replay of a pre-started run with its own limits", run.Request{Program: code("print(1)"), Options: run.Options{Interpreter: run.InterpreterPrestarted, Limits: limits.Limits{Pids: 50}}}, false, true, "pids limit differs", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.PoolReady(ctx); err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			res, err := s.Run(ctx, tc.req, rec)
			if err != nil {
				t.Fatal(err)
			}
			if (res.Start == run.StartWarm) != tc.warm || !strings.Contains(res.ColdReason, tc.cold) || res.Status != run.StatusOK {
				t.Errorf("%s %s (cold: %q), want warm %v, cold reason with %q", res.Status, res.Start, res.ColdReason, tc.warm, tc.cold)
			}
			started := rec.started[0]
			specs := rt.Specs()
			ran := specs[len(specs)-1]
			if started.Prestarted != tc.prestarted || (ran.Prestart != nil) != tc.prestarted {
				t.Fatalf("pre-started: Started says %v, the engine ran %+v; want %v", started.Prestarted, ran.Prestart, tc.prestarted)
			}
			if tc.prestarted && (ran.Prestart.Interpreter != "python3" || ran.Prestart.Language != "python" || !slices.Equal(started.Preimported, tc.modules) || !slices.Equal(ran.Prestart.Modules, tc.modules)) {
				t.Errorf("the interpreter %+v, Started's modules %v; want python3 with %v", ran.Prestart, started.Preimported, tc.modules)
			}
		})
	}
	t.Run("a command cannot ask for one", func(t *testing.T) {
		req := run.Request{Command: &run.Command{Shell: "true"}, Options: run.Options{Interpreter: run.InterpreterPrestarted}}
		_, err := s.Run(context.Background(), req, newRecorder())
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "interpreter") {
			t.Errorf("err = %v, want INVALID_ARGUMENT naming the interpreter", err)
		}
	})
}

// TestReadAtStart: every variable may be read as an interpreter starts
// but those known not to be; the dynamic loader's and libc's among them,
// which the fourth review found a deny-list missed.
func TestReadAtStart(t *testing.T) {
	for key, want := range map[string]bool{
		"PYTHONPATH": true, "PYTHONHASHSEED": true, "LC_ALL": true, "LANG": true, "HOME": true, "SANDBOX_SEED": true,
		"OMP_NUM_THREADS": true, "OPENBLAS_NUM_THREADS": true, "NPY_DISABLE_CPU_FEATURES": true, "TZ": true,
		"LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "GLIBC_TUNABLES": true, "MALLOC_ARENA_MAX": true, "MY_TOKEN": true, "MPLBACKEND": true,
		"HTTP_PROXY": false, "USER": false, "SOURCE_DATE_EPOCH": false,
	} {
		if got := readAtStart("python", key); got != want {
			t.Errorf("readAtStart(python, %s) = %v, want %v", key, got, want)
		}
	}
	for key, want := range map[string]bool{"NODE_OPTIONS": true, "LD_PRELOAD": true, "UV_THREADPOOL_SIZE": true, "PYTHONPATH": false, "HTTPS_PROXY": false} {
		if got := readAtStart("javascript", key); got != want {
			t.Errorf("readAtStart(javascript, %s) = %v, want %v", key, got, want)
		}
	}
}

// TestLoaderVariablesNeedAFreshInterpreter: a program whose LD_PRELOAD,
// GLIBC_TUNABLES or MALLOC_ variables differ from the pooled
// interpreter's does not run in it, and the reason names the variable.
func TestLoaderVariablesNeedAFreshInterpreter(t *testing.T) {
	def := DefaultConfig().Limits.Default
	startup := map[string]string{"PATH": "/usr/bin"}
	for _, key := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "GLIBC_TUNABLES", "MALLOC_PERTURB_", "LD_AUDIT"} {
		env := map[string]string{"PATH": "/usr/bin", key: "x"}
		for _, lang := range []string{"python", "javascript"} {
			if why := fitsPool(lang, env, startup, def, def); !strings.Contains(why, key) {
				t.Errorf("%s with %s set: fitsPool() = %q, want a reason that names it", lang, key, why)
			}
		}
	}
	env := map[string]string{"PATH": "/usr/bin", "HTTP_PROXY": "http://gw:3128", "USER": "sandbox"}
	if why := fitsPool("python", env, startup, def, def); why != "" {
		t.Errorf("variables no interpreter reads at start: fitsPool() = %q, want none", why)
	}
}

func TestEveryPrestartedLanguageIsTheRuntimes(t *testing.T) {
	for lang := range lateVars {
		if !slices.Contains(runtime.PrestartLanguages, lang) {
			t.Errorf("%s has late variables but no container can pre-start it", lang)
		}
	}
	for _, lang := range runtime.PrestartLanguages {
		if _, ok := lateVars[lang]; !ok {
			t.Errorf("%s can be pre-started, but which variables it does not read as it starts is not known", lang)
		}
	}
}

func TestLoadsAny(t *testing.T) {
	modules := []string{"numpy", "pandas"}
	for code, want := range map[string]bool{
		"import numpy":                      true,
		"import numpy as np":                true,
		"  from pandas.io import json":      true,
		"import os, sys as system, pandas":  true,
		"import numpyx":                     false,
		"x = 1 # import numpy":              false,
		"print('numpy')":                    false,
		"def f():\n    import numpy.linalg": true,
		"importlib.import_module('numpy')":  false,
	} {
		if got := loadsAny("python", code, modules); got != want {
			t.Errorf("loadsAny(python, %q) = %v, want %v", code, got, want)
		}
	}
	for code, want := range map[string]bool{
		"const _ = require('lodash')":    true,
		"import _ from \"lodash/fp\"":    true,
		"const x = require('lodash-es')": false,
		"console.log('lodash')":          false,
	} {
		if got := loadsAny("javascript", code, []string{"lodash"}); got != want {
			t.Errorf("loadsAny(javascript, %q) = %v, want %v", code, got, want)
		}
	}
}
