//go:build integration

package conformance

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
)

// testForkStorm ends programs that leave a process forking without end:
// each result must come soon after the program's exit, not at its timeout
// (one kill of every process can miss what is being forked meanwhile).
func testForkStorm(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import subprocess, time
subprocess.Popen(['sh', '-c', 'while :; do (sleep 100 &); done'], start_new_session=True)
time.sleep(0.3)
print('left it', flush=True)
`
	for i := range 10 {
		start := time.Now()
		res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second, Pids: 256}), nil)
		s.noContainerOfRun(t, res.RunID)
		if res.Status != task.StatusOK {
			t.Fatalf("run %d: %s (%s)", i, res.Status, res.Message)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("run %d took %v: its leftovers held it", i, took)
		}
	}
}
