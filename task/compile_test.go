package task

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// compiler stands for a container whose compile step, when it has one,
// fails as the init reports it; a program without one prints its argv.
func compiler(_ context.Context, spec runtime.Spec) runtime.Exit {
	if len(spec.Compile) > 0 {
		io.WriteString(spec.Stderr, "main.c:1:1: error: expected ';'\n")
		return runtime.Exit{Code: 1, CompileFailed: true}
	}
	io.WriteString(spec.Stdout, strings.Join(spec.Argv, " "))
	return runtime.Exit{}
}

func TestACompileErrorIsItsOwnOutcome(t *testing.T) {
	rt := fake.New(compiler)
	rt.Images["sandboxd/gcc"] = "sha256:gcc"
	s := newService(t, rt, func(c *Config) { c.AllowedImages = append(c.AllowedImages, "sha256:gcc") })
	rec := newRecorder()
	res, err := s.Run(context.Background(), run.Request{Program: &run.Program{Language: "c", Code: "int main() { return 0 }"}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusCompileError || res.ExitCode != 1 || !strings.Contains(res.Message, "did not compile") {
		t.Fatalf("result = %s %d (%s); want COMPILE_ERROR with the compiler's exit code", res.Status, res.ExitCode, res.Message)
	}
	if got := rec.text(run.Stderr); !strings.Contains(got, "error: expected ';'") {
		t.Errorf("stderr %q, want the compiler's diagnostics", got)
	}
	c, _ := images.Default().Language("c")
	spec := rt.Specs()[len(rt.Specs())-1]
	if !slices.Equal(spec.Compile, c.Compile) || !slices.Equal(spec.Argv, c.Command) {
		t.Errorf("the container was given compile %q and argv %q; want the recipe's %q and %q", spec.Compile, spec.Argv, c.Compile, c.Command)
	}
	// Only a language's program is compiled: a command never is.
	if _, err := s.Run(context.Background(), run.Request{Command: &run.Command{Argv: []string{"true"}}}, newRecorder()); err != nil {
		t.Fatal(err)
	}
	if spec := rt.Specs()[len(rt.Specs())-1]; spec.Compile != nil {
		t.Errorf("a command was given a compile step %q", spec.Compile)
	}
}

func TestASessionRefusesACompiledLanguage(t *testing.T) {
	rt := fake.New(compiler)
	rt.Images["sandboxd/gcc"] = "sha256:gcc"
	s := newService(t, rt, func(c *Config) { c.AllowedImages = append(c.AllowedImages, "sha256:gcc") })
	_, err := s.CreateSession(context.Background(), session.Request{Language: "cpp"})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "language: cpp is compiled") || !strings.Contains(err.Error(), "sandboxd/gcc") {
		t.Fatalf("CreateSession(cpp) = %v; want INVALID_ARGUMENT naming the image to build in", err)
	}
	if n := len(rt.Specs()); n != 0 {
		t.Errorf("%d containers were made for a refused session", n)
	}
}
