//go:build integration

package conformance

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

// Axis is what can change a case's outcome; the pairs it runs on follow
// from it, as gVisor's tests declare the configurations each runs in.
// docs/development.md has the table that TestMatrixIsDocumented keeps.
type Axis int

const (
	// Logic: neither the backend nor the OCI runtime can change it (the
	// tool gates, a session's chart, replay and fork, what is read on the
	// host side): the reference pair only.
	Logic Axis = iota
	// OCIRuntime: the OCI runtime can (isolation, seccomp, pids, OOM, the
	// kernel the program sees, signals to the init): every OCI runtime on
	// the reference backend.
	OCIRuntime
	// Backend: the backend can (streaming, cancel, reaping, the egress
	// link, a pool's fills and shutdowns): every backend with the
	// reference runtime, and gVisor on gvisorBackend.
	Backend
	// Both: either can (limits set at create or updated on a pooled
	// container, mounts, the network a spec gives): Backend's pairs and
	// OCIRuntime's.
	Both
	// Kernel: only the kernel the program sees can (the host's or gVisor's:
	// a language's tools): the reference pair and gVisor beside it.
	Kernel
	// All: every pair, for a case whose axis is unclear.
	All
)

// The pairs: the reference one, on which Logic cases run (the default
// backend on one host, with the leanest runtime), and the backend on
// which Backend cases also run on gVisor (containerd: Kubernetes' path
// to gVisor).
const (
	refBackend    = "direct"
	refRuntime    = runtime.CrunName
	gvisorBackend = "containerd"
)

var (
	backendNames = []string{"docker", "containerd", "direct"}
	ociRuntimes  = []string{"runc", runtime.CrunName, runtime.RunscName}
)

func (a Axis) String() string {
	return [...]string{"logic", "OCI runtime", "backend", "both", "kernel", "all"}[a]
}

// why is the axis's reason, for the table.
func (a Axis) why() string {
	return [...]string{
		"neither can change it: the reference pair",
		"every OCI runtime, on the reference backend",
		"every backend with the reference runtime, and gVisor on " + gvisorBackend,
		"the backend's pairs and the OCI runtime's",
		"the host's kernel and gVisor's",
		"every pair",
	}[a]
}

// runsOn says whether a case of axis a runs on backend with ociRuntime in
// CI's matrix.
func (a Axis) runsOn(backend, ociRuntime string) bool {
	ref := backend == refBackend && ociRuntime == refRuntime
	switch a {
	case Logic:
		return ref
	case OCIRuntime:
		return backend == refBackend
	case Backend:
		return ociRuntime == refRuntime || backend == gvisorBackend && ociRuntime == runtime.RunscName
	case Both:
		return OCIRuntime.runsOn(backend, ociRuntime) || Backend.runsOn(backend, ociRuntime)
	case Kernel:
		return ref || backend == refBackend && ociRuntime == runtime.RunscName
	}
	return true
}

// on says whether a case of axis a runs on target: as CI's matrix says,
// or everywhere under make test-matrix (testutil.MatrixEnv).
func (a Axis) on(target Target) bool {
	return testutil.WholeMatrix() || a.runsOn(target.Backend, target.OCIRuntime)
}

// kase is one case of a group, with what can change its outcome.
type kase[E any] struct {
	name string
	axis Axis
	fn   func(*testing.T, E)
}

// group is cases that share what setup makes for them once (a service, a
// gateway and its test hosts): made only on a pair where one of them runs.
// An empty name runs the cases at the pair's top level.
type group[E any] struct {
	name  string
	setup func(*testing.T, Target) E
	cases []kase[E]
}

// grouped is a group of any environment, as the suite lists them.
type grouped interface {
	runs(target Target) bool
	run(t *testing.T, target Target)
	rows() []matrixRow
}

// on are the cases that run on target.
func (g group[E]) on(target Target) []kase[E] {
	var on []kase[E]
	for _, c := range g.cases {
		if c.axis.on(target) {
			on = append(on, c)
		}
	}
	return on
}

func (g group[E]) runs(target Target) bool { return len(g.on(target)) > 0 }

func (g group[E]) run(t *testing.T, target Target) {
	on := g.on(target)
	if len(on) == 0 {
		return
	}
	body := func(t *testing.T) {
		env := g.setup(t, target)
		for _, c := range on {
			t.Run(c.name, func(t *testing.T) { c.fn(t, env) })
		}
	}
	if g.name == "" {
		body(t)
		return
	}
	t.Run(g.name, body)
}

// matrixRow is a case of the table in docs/development.md.
type matrixRow struct {
	path string
	axis Axis
}

func (g group[E]) rows() []matrixRow {
	var out []matrixRow
	for _, c := range g.cases {
		out = append(out, matrixRow{path: strings.TrimPrefix(g.name+"/"+c.name, "/"), axis: c.axis})
	}
	return out
}

// the is a group's environment that is only its target's suite.
func the(s *suite) func(*testing.T, Target) *suite {
	return func(*testing.T, Target) *suite { return s }
}

// pairs are the pairs a case of axis a runs on in CI, as backend/runtime.
func (a Axis) pairs() []string {
	var out []string
	for _, b := range backendNames {
		for _, r := range ociRuntimes {
			if a.runsOn(b, r) {
				out = append(out, b+"/"+r)
			}
		}
	}
	return out
}

// matrixTable is the table of every case of the suite: where it runs in
// CI and why, and how many case-runs that makes against every pair.
func matrixTable() string {
	var b strings.Builder
	axes := map[Axis]int{}
	runs, all := 0, 0
	var rows []matrixRow
	for _, g := range suiteGroups(Target{}) {
		rows = append(rows, g.rows()...)
	}
	for _, r := range rows {
		axes[r.axis]++
		runs += len(r.axis.pairs())
		all += len(backendNames) * len(ociRuntimes)
	}
	b.WriteString("| axis | cases | pairs in CI | why |\n| --- | ---: | --- | --- |\n")
	for a := Logic; a <= All; a++ {
		if axes[a] > 0 {
			fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", a, axes[a], strings.Join(a.pairs(), ", "), a.why())
		}
	}
	fmt.Fprintf(&b, "\n%d cases, %d case-runs in CI (%d on every pair, `make test-matrix`). Each case, and the pairs\nit runs on in CI (PoolOff's cases that the pool could change run there on the reference pair):\n\n", len(rows), runs, all)
	b.WriteString("| case | axis |")
	for _, be := range backendNames {
		for _, r := range ociRuntimes {
			fmt.Fprintf(&b, " %s/%s |", be, r)
		}
	}
	b.WriteString("\n| --- | --- |" + strings.Repeat(" :---: |", len(backendNames)*len(ociRuntimes)) + "\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |", r.path, r.axis)
		for _, be := range backendNames {
			for _, rt := range ociRuntimes {
				mark := " "
				if r.axis.runsOn(be, rt) {
					mark = "x"
				}
				fmt.Fprintf(&b, " %s |", mark)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestMatrixIsDocumented keeps docs/development.md's table of the matrix
// as the suite declares it (go test -tags integration -update rewrites
// it). It needs no engine.
func TestMatrixIsDocumented(t *testing.T) {
	testutil.GoldenBlock(t, filepath.Join("..", "docs", "development.md"), "matrix", []byte(matrixTable()))
}

// TestEveryCaseHasOneName: a name that two cases of a group share would
// run twice and be listed once.
func TestEveryCaseHasOneName(t *testing.T) {
	var paths []string
	for _, g := range suiteGroups(Target{}) {
		for _, r := range g.rows() {
			if slices.Contains(paths, r.path) {
				t.Errorf("%s is declared twice", r.path)
			}
			paths = append(paths, r.path)
		}
	}
}
