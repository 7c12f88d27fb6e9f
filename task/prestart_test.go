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
	s := pooled(t, rt, 1, nil)
	for _, spec := range rt.Specs() {
		t.Fatalf("a container ran before any task: %+v", spec)
	}
	for _, tc := range []struct {
		name       string
		req        run.Request
		warm       bool
		prestarted bool
		cold       string // in the cold reason
	}{
		{"fits", run.Request{Program: code("print(1)")}, true, true, ""},
		{"a variable Python reads as it starts", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"PYTHONHASHSEED": "7"}}}, true, false, ""},
		{"a seed, read by sitecustomize", run.Request{Program: code("print(1)"), Options: run.Options{Seed: new(uint64)}}, true, false, ""},
		{"a variable it does not read", run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"MY_TOKEN": "x"}}}, true, true, ""},
		{"less memory than the pool's", run.Request{Program: code("print(1)"), Options: run.Options{Limits: limits.Limits{MemoryBytes: 256 << 20}}}, true, false, ""},
		{"asked for fresh", run.Request{Program: code("print(1)"), Options: run.Options{Interpreter: run.InterpreterFresh}}, true, false, ""},
		{"a command", run.Request{Command: &run.Command{Argv: []string{"python3", "-c", "print(1)"}}}, true, false, ""},
		{"below the memory floor", run.Request{Program: code("print(1)"), Options: run.Options{Limits: limits.Limits{MemoryBytes: 64 << 20}}}, false, false, "below 128 MiB"},
		{"a replay of a pre-started run with its own limits", run.Request{Program: code("print(1)"), Options: run.Options{Interpreter: run.InterpreterPrestarted, Limits: limits.Limits{Pids: 50}}}, false, true, "pids limit differs"},
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
				t.Errorf("pre-started: Started says %v, the engine ran %+v; want %v", started.Prestarted, ran.Prestart, tc.prestarted)
			}
			if tc.prestarted && (ran.Prestart.Interpreter != "python3" || ran.Prestart.Language != "python" || !slices.Equal(started.Preimported, []string{"numpy", "pandas"}) || !slices.Equal(ran.Prestart.Modules, started.Preimported)) {
				t.Errorf("the interpreter %+v, Started's modules %v; want python3 with numpy and pandas", ran.Prestart, started.Preimported)
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

func TestReadAtStart(t *testing.T) {
	for key, want := range map[string]bool{
		"PYTHONPATH": true, "PYTHONHASHSEED": true, "LC_ALL": true, "LANG": true, "HOME": true, "SANDBOX_SEED": true,
		"OMP_NUM_THREADS": true, "OPENBLAS_NUM_THREADS": true, "NPY_DISABLE_CPU_FEATURES": true, "TZ": true,
		"HTTP_PROXY": false, "MY_TOKEN": false, "USER": false, "MPLBACKEND": false,
	} {
		if got := readAtStart("python", key); got != want {
			t.Errorf("readAtStart(python, %s) = %v, want %v", key, got, want)
		}
	}
}

func TestEveryPrestartedLanguageIsTheRuntimes(t *testing.T) {
	for lang := range startupVars {
		if !slices.Contains(runtime.PrestartLanguages, lang) {
			t.Errorf("%s has start-up variables but no container can pre-start it", lang)
		}
	}
	for _, lang := range runtime.PrestartLanguages {
		if _, ok := startupVars[lang]; !ok {
			t.Errorf("%s can be pre-started, but which variables it reads as it starts is not known", lang)
		}
	}
}
