// Package testreport reads what `go test -json` writes and reports what CI
// prints at its end: the slowest tests, and each failed test with its
// output.
package testreport

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent).
type Event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
	// ImportPath names the test binary of a build-output event, and
	// FailedBuild the one whose build failed a package.
	ImportPath, FailedBuild string
}

// Test is one test's end.
type Test struct {
	Package, Name string
	Elapsed       time.Duration
	Passed        bool
	// Output is what it printed, its subtests' included.
	Output string
	// Leaf says it has no subtests.
	Leaf bool
}

// Report is what a set of test runs came to.
type Report struct {
	Tests []Test
	// Broken are packages that failed outside any test (a build, a
	// panic, a timeout).
	Broken []Test
}

// Read adds the events of one `go test -json` stream to r. A build's
// output is kept for the package it failed; lines that are not events are
// kept for a package that failed with no output of its own.
func (r *Report) Read(in io.Reader) error {
	type key struct{ pkg, test string }
	out := map[key]*strings.Builder{}
	parents := map[key]bool{}
	add := func(k key, s string) {
		b, ok := out[k]
		if !ok {
			b = &strings.Builder{}
			out[k] = b
		}
		b.WriteString(s)
	}
	builds := map[string]*strings.Builder{}
	var stray strings.Builder
	// This stream's tests: what it says of parents is of them alone.
	first := len(r.Tests)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			stray.WriteString(sc.Text() + "\n")
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			if builds[e.ImportPath] == nil {
				builds[e.ImportPath] = &strings.Builder{}
			}
			builds[e.ImportPath].WriteString(e.Output)
		case "output":
			add(k, e.Output)
			if i := strings.LastIndex(e.Test, "/"); i > 0 {
				parents[key{e.Package, e.Test[:i]}] = true
			}
			// A subtest's lines are its parents' too.
			for t := e.Test; strings.Contains(t, "/"); {
				t = t[:strings.LastIndex(t, "/")]
				add(key{e.Package, t}, e.Output)
			}
		case "run":
			if i := strings.LastIndex(e.Test, "/"); i > 0 {
				parents[key{e.Package, e.Test[:i]}] = true
			}
		case "pass", "fail":
			t := Test{Package: e.Package, Name: e.Test, Elapsed: time.Duration(e.Elapsed * float64(time.Second)), Passed: e.Action == "pass"}
			if b := out[k]; b != nil {
				t.Output = b.String()
			}
			if e.Test == "" {
				if b := builds[e.FailedBuild]; b != nil {
					t.Output = b.String() + t.Output
				}
				if strings.TrimSpace(t.Output) == "" {
					t.Output = stray.String()
				}
				if !t.Passed {
					r.Broken = append(r.Broken, t)
				}
				continue
			}
			r.Tests = append(r.Tests, t)
		}
	}
	for i := first; i < len(r.Tests); i++ {
		t := &r.Tests[i]
		t.Leaf = !parents[key{t.Package, t.Name}]
	}
	return sc.Err()
}

// Slowest are the n slowest tests without subtests, slowest first.
func (r *Report) Slowest(n int) []Test {
	var leaves []Test
	for _, t := range r.Tests {
		if t.Leaf {
			leaves = append(leaves, t)
		}
	}
	slices.SortStableFunc(leaves, func(a, b Test) int { return cmp.Compare(b.Elapsed, a.Elapsed) })
	return leaves[:min(n, len(leaves))]
}

// Failed are the tests that failed without a failed subtest (the failure
// itself), then the packages broken outside a test.
func (r *Report) Failed() []Test {
	failedParent := map[string]bool{}
	for _, t := range r.Tests {
		if !t.Passed {
			if i := strings.LastIndex(t.Name, "/"); i > 0 {
				failedParent[t.Package+" "+t.Name[:i]] = true
			}
		}
	}
	var out []Test
	for _, t := range r.Tests {
		if !t.Passed && !failedParent[t.Package+" "+t.Name] {
			out = append(out, t)
		}
	}
	return append(out, r.Broken...)
}

// WriteSlowest prints the n slowest tests as a table.
func (r *Report) WriteSlowest(w io.Writer, n int) {
	fmt.Fprintf(w, "%-10s  %s\n", "seconds", "test")
	for _, t := range r.Slowest(n) {
		fmt.Fprintf(w, "%10.1f  %s %s\n", t.Elapsed.Seconds(), strings.TrimPrefix(t.Package, "github.com/sandboxd/sandboxd/"), t.Name)
	}
}

// WriteFailed prints each failure with the last lines of its output.
func (r *Report) WriteFailed(w io.Writer, lines int) {
	for _, t := range r.Failed() {
		name := t.Name
		if name == "" {
			name = "(the package itself)"
		}
		fmt.Fprintf(w, "--- FAIL: %s %s (%.1fs)\n", t.Package, name, t.Elapsed.Seconds())
		out := strings.Split(strings.TrimRight(t.Output, "\n"), "\n")
		if len(out) > lines {
			fmt.Fprintf(w, "    ... %d lines before\n", len(out)-lines)
			out = out[len(out)-lines:]
		}
		for _, l := range out {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}
