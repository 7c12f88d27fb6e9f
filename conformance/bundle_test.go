//go:build integration

package conformance

import (
	"bytes"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// testBundleOfHostileWorkspace runs a program that leaves a link to a host
// secret, a FIFO, and a tree of 10,000 files: the bundle holds the program's
// own files only, within the limits, and collecting it does not hang.
func testBundleOfHostileWorkspace(t *testing.T, s *suite) {
	svc := s.service(t, func(c *task.Config) {
		c.Output = taskdir.OutputLimits{Files: 100, Bytes: 1 << 20, Entries: 2000, Depth: 8}
	})
	code := `import os
open('result.txt', 'w').write('the answer is 42\n')
os.symlink('/etc/shadow', 'out')
os.symlink('/etc', 'etc')
os.mkfifo('pipe')
for d in range(100):
    os.makedirs(f'tree/d{d:03}')
    for f in range(100):
        open(f'tree/d{d:03}/f{f:03}', 'w').write('x')
print('left', len(os.listdir('tree')), 'folders')
`
	start := time.Now()
	res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second}), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	b, entries := readBundle(t, svc, res)
	t.Logf("run and bundle took %v", time.Since(start).Round(time.Millisecond))
	if string(entries["output/result.txt"]) != "the answer is 42\n" {
		t.Errorf("output/result.txt = %q", entries["output/result.txt"])
	}
	for p, content := range entries {
		if bytes.Contains(content, []byte("root:")) {
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
	wantPipe := "fifo"
	if s.gvisor() {
		wantPipe = "" // the FIFO stays inside gVisor
	}
	if types["out"] != "symlink" || types["etc"] != "symlink" || types["pipe"] != wantPipe {
		t.Errorf("out %q etc %q pipe %q, want symlink, symlink, %q", types["out"], types["etc"], types["pipe"], wantPipe)
	}
	if len(b.Manifest.Reproducible.Outputs) != 2000 || !b.Manifest.Reproducible.OutputsTruncated || stored != 100 {
		t.Errorf("%d listed (truncated %v), %d stored; want 2000 listed and truncated, 100 stored",
			len(b.Manifest.Reproducible.Outputs), b.Manifest.Reproducible.OutputsTruncated, stored)
	}
}

func testSameProgramTwice(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import json, time
print(json.dumps({'hash': hash('seed'), 'tz': time.tzname, 'sum': sum(range(1000))}))
open('out.json', 'w').write(str(hash('x')))
`
	var results []run.Result
	for range 2 {
		res := s.run(t, svc, python(code, limits.Limits{}), nil)
		s.noContainerOfRun(t, res.RunID)
		results = append(results, res)
	}
	if results[0].BundleDigest == results[1].BundleDigest {
		t.Fatal("two runs share a bundle digest")
	}
	if results[0].ReproducibleDigest != results[1].ReproducibleDigest {
		a, _ := readBundle(t, svc, results[0])
		b, _ := readBundle(t, svc, results[1])
		t.Fatalf("the reproducible parts differ:\n%+v\n%+v", a.Manifest.Reproducible, b.Manifest.Reproducible)
	}
}
