package testreport

import (
	"bytes"
	"strings"
	"testing"
)

// stream is `go test -json` of a package with a parent test whose second
// subtest fails, a quick test, and a package whose build failed.
const stream = `{"Action":"run","Package":"p","Test":"TestPair"}
{"Action":"run","Package":"p","Test":"TestPair/Slow"}
{"Action":"output","Package":"p","Test":"TestPair/Slow","Output":"slow one\n"}
{"Action":"pass","Package":"p","Test":"TestPair/Slow","Elapsed":42}
{"Action":"run","Package":"p","Test":"TestPair/Broken"}
{"Action":"output","Package":"p","Test":"TestPair/Broken","Output":"    x_test.go:9: want 1, got 2\n"}
{"Action":"fail","Package":"p","Test":"TestPair/Broken","Elapsed":3}
{"Action":"fail","Package":"p","Test":"TestPair","Elapsed":45}
{"Action":"run","Package":"p","Test":"TestQuick"}
{"Action":"pass","Package":"p","Test":"TestQuick","Elapsed":0.1}
{"Action":"fail","Package":"p","Elapsed":45.2}
{"ImportPath":"q [q.test]","Action":"build-output","Output":"q/x.go:1:1: expected 'package', found 'EOF'\n"}
{"ImportPath":"q [q.test]","Action":"build-fail"}
{"Action":"fail","Package":"q","Elapsed":0,"FailedBuild":"q [q.test]"}
`

func TestSlowestAreLeavesAndFailuresAreTheirOwn(t *testing.T) {
	var r Report
	if err := r.Read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.Slowest(2) {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "TestPair/Slow TestPair/Broken" {
		t.Errorf("Slowest(2) = %q; want the two subtests, slowest first, not their parent", names)
	}
	var failed []string
	for _, f := range r.Failed() {
		failed = append(failed, f.Package+":"+f.Name)
	}
	if strings.Join(failed, " ") != "p:TestPair/Broken p: q:" {
		t.Errorf("Failed() = %q; want the subtest, not its parent, then the packages", failed)
	}
	var b bytes.Buffer
	r.WriteFailed(&b, 5)
	for _, want := range []string{"want 1, got 2", "expected 'package'"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteFailed() does not show %q:\n%s", want, b.String())
		}
	}
}

// TestLeavesAreTheirStreams: a second stream does not make the first's
// parent tests leaves (CI reads one stream per package).
func TestLeavesAreTheirStreams(t *testing.T) {
	var r Report
	for _, s := range []string{stream, `{"Action":"run","Package":"z","Test":"TestZ"}
{"Action":"pass","Package":"z","Test":"TestZ","Elapsed":1}
`} {
		if err := r.Read(strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range r.Slowest(10) {
		if s.Name == "TestPair" {
			t.Fatalf("TestPair, which has subtests, is listed among the leaves: %+v", r.Slowest(10))
		}
	}
}
