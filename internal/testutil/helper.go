package testutil

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartHelper runs the test binary again as a helper process, with env
// set to value (the helper's TestMain reads it), optionally under the
// command wrap (unshare ...), and waits until the file ready exists, which
// the helper makes when it is ready. The helper is killed when the test
// ends; what names it in a failure.
func StartHelper(t testing.TB, env, value, ready, what string, wrap ...string) *exec.Cmd {
	t.Helper()
	args := append(append([]string{}, wrap...), os.Args[0])
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env+"="+value)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not ready in 10 s", what)
		}
	}
}
