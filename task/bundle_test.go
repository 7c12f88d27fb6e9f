package task

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// withStore gives a service an artifact store in a temp folder.
func withStore(t *testing.T) Option {
	t.Helper()
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	return WithArtifacts(store)
}

// workspaceOf returns the host folder of a spec's /workspace.
func workspaceOf(spec runtime.Spec) string {
	for _, m := range spec.Mounts {
		if m.Target == run.WorkspaceDir {
			return m.Source
		}
	}
	return ""
}

// readBundle verifies a stored bundle and returns its entries.
func readBundle(t *testing.T, s *Service, digest string) (*artifacts.Bundle, map[string][]byte) {
	t.Helper()
	f, err := s.OpenBundle(access.WithCaller(context.Background(), access.Operator), digest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	b, err := artifacts.Verify(f, digest, artifacts.DefaultReadLimits(), func(p string, r io.Reader) error {
		entries[p], err = io.ReadAll(r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, entries
}

func TestRunWritesABundle(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		io.WriteString(spec.Stdout, "42\n")
		ws := workspaceOf(spec)
		os.WriteFile(filepath.Join(ws, "result.json"), []byte(`{"answer":42}`), 0o644)
		os.MkdirAll(filepath.Join(ws, "plots"), 0o755)
		os.WriteFile(filepath.Join(ws, "plots", "a.png"), []byte("png"), 0o755)
		return runtime.Exit{}
	})
	s := newService(t, rt, nil, withStore(t))
	seed := uint64(7)
	req := run.Request{Program: code("print(42)"), Options: run.Options{
		Files: []run.File{{Path: "in.csv", Content: []byte("a,b")}}, Stdin: []byte("stdin"), Env: map[string]string{"K": "v"}, Seed: &seed,
	}}
	res, err := s.Run(context.Background(), req, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if res.BundleDigest == "" || res.BundleError != "" {
		t.Fatalf("no bundle: %q", res.BundleError)
	}
	b, entries := readBundle(t, s, res.BundleDigest)
	for path, want := range map[string]string{
		"code/main.py": "print(42)", "input/in.csv": "a,b", "stdin": "stdin", "stdout": "42\n", "stderr": "",
		"output/result.json": `{"answer":42}`, "output/plots/a.png": "png",
	} {
		if got, ok := entries[path]; !ok || string(got) != want {
			t.Errorf("entry %s = %q (present %v), want %q", path, got, ok, want)
		}
	}
	m := b.Manifest
	r := m.Reproducible
	if r.Request.Kind != "code" || r.Request.Seed != "7" || r.Request.Env["K"] != "v" || !r.Request.Stdin || r.ImageDigest != "sha256:python" {
		t.Errorf("request = %+v image %s", r.Request, r.ImageDigest)
	}
	if r.Determinism["SANDBOX_SEED"] != "7" || r.Determinism["PYTHONHASHSEED"] != "0" || r.Determinism["SOURCE_DATE_EPOCH"] != "946684800" || r.Determinism["hostname"] != "sandbox" {
		t.Errorf("determinism = %v", r.Determinism)
	}
	if r.Outcome.Status != "OK" || m.Run.RunID != res.RunID || m.Run.ReproducibleDigest != res.ReproducibleDigest {
		t.Errorf("outcome %+v run %+v", r.Outcome, m.Run)
	}
	if len(res.Files) != 3 || res.Files[2].Path != "result.json" || res.Files[2].SHA256 == "" {
		t.Errorf("files = %+v", res.Files)
	}
}

func TestSameProgramTwiceSameReproduciblePart(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		io.WriteString(spec.Stdout, "deterministic\n")
		os.WriteFile(filepath.Join(workspaceOf(spec), "out"), []byte("x"), 0o644)
		time.Sleep(time.Millisecond)
		return runtime.Exit{PeakMemoryBytes: time.Now().UnixNano() % 1000}
	})
	s := newService(t, rt, nil, withStore(t))
	var results []run.Result
	for range 2 {
		res, err := s.Run(context.Background(), run.Request{Program: code("print(1)")}, newRecorder())
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	if results[0].BundleDigest == results[1].BundleDigest {
		t.Fatal("two runs share a bundle digest: the run section is missing")
	}
	if results[0].ReproducibleDigest != results[1].ReproducibleDigest {
		a, _ := readBundle(t, s, results[0].BundleDigest)
		b, _ := readBundle(t, s, results[1].BundleDigest)
		t.Fatalf("the reproducible parts differ:\n%+v\n%+v", a.Manifest.Reproducible, b.Manifest.Reproducible)
	}
}

// TestHostileWorkspace leaves what an attacker would: links to host files
// and folders, a FIFO, a socket, and a tree of 10,000 files. The daemon must
// read no host file, not hang, and keep to its limits.
func TestHostileWorkspace(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("HOST SECRET"), 0o600)
	hostFIFO := filepath.Join(t.TempDir(), "fifo")
	unix.Mkfifo(hostFIFO, 0o600)
	var sockErr error
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		ws := workspaceOf(spec)
		os.Symlink(secret, filepath.Join(ws, "out"))
		os.Symlink("/etc/shadow", filepath.Join(ws, "shadow"))
		os.Symlink(filepath.Dir(secret), filepath.Join(ws, "hostdir"))
		os.Symlink(hostFIFO, filepath.Join(ws, "hostfifo"))
		unix.Mkfifo(filepath.Join(ws, "pipe"), 0o644)
		sockErr = bindSocket(ws, "sock")
		for d := range 100 {
			dir := filepath.Join(ws, "tree", fmt.Sprintf("d%03d", d))
			os.MkdirAll(dir, 0o755)
			for f := range 100 {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte("x"), 0o644)
			}
		}
		return runtime.Exit{}
	})
	s := newService(t, rt, func(c *Config) {
		c.Output = taskdir.OutputLimits{Files: 50, Bytes: 1 << 20, Entries: 500, Depth: 8}
	}, withStore(t))
	done := make(chan struct{})
	var res run.Result
	var err error
	go func() {
		res, err = s.Run(context.Background(), run.Request{Program: code("attack()")}, newRecorder())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("collecting the workspace hangs")
	}
	if err != nil || res.BundleDigest == "" {
		t.Fatalf("Run() = %v, bundle error %q", err, res.BundleError)
	}
	if sockErr != nil {
		t.Fatalf("make the workspace's socket: %v", sockErr)
	}
	b, entries := readBundle(t, s, res.BundleDigest)
	for p, content := range entries {
		if bytes.Contains(content, []byte("HOST SECRET")) || strings.Contains(string(content), "root:") {
			t.Fatalf("entry %s holds a host file", p)
		}
	}
	types := map[string]string{}
	stored := 0
	for _, o := range b.Manifest.Reproducible.Outputs {
		types[o.Path] = o.Type
		if o.SHA256 != "" {
			stored++
		}
	}
	for p, want := range map[string]string{"out": "symlink", "shadow": "symlink", "hostdir": "symlink", "hostfifo": "symlink", "pipe": "fifo", "sock": "socket"} {
		if types[p] != want {
			t.Errorf("%s is recorded as %q, want %q", p, types[p], want)
		}
	}
	if n := len(b.Manifest.Reproducible.Outputs); n != 500 || !b.Manifest.Reproducible.OutputsTruncated {
		t.Errorf("%d outputs listed (truncated %v), want the limit of 500", n, b.Manifest.Reproducible.OutputsTruncated)
	}
	if stored != 50 {
		t.Errorf("%d files stored, want the limit of 50", stored)
	}
}

// bindSocket makes a Unix socket named name in dir. It binds through
// dir's descriptor: a socket's path holds 108 bytes, which a temp folder
// under a long TMPDIR passes.
func bindSocket(dir, name string) error {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", d, name)})
}

func TestBundleOfARuntimeError(t *testing.T) {
	rt := &refusingRuntime{fake.New(nil)}
	s := newService(t, rt, nil, withStore(t))
	res, err := s.Run(context.Background(), run.Request{Command: &run.Command{Argv: []string{"x"}}}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusRuntimeError || res.BundleDigest == "" {
		t.Fatalf("result = %+v", res)
	}
}

// refusingRuntime refuses to start any container, as a backend refuses a
// broken image.
type refusingRuntime struct{ *fake.Runtime }

func (r *refusingRuntime) Start(context.Context, runtime.Spec) (runtime.Container, error) {
	return nil, errdefs.ErrFailedPrecondition.WithMessage("container did not start: OCI runtime create failed")
}
