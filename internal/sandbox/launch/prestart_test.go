package launch

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPrestartersRunTheirProgram runs each pre-starter on the host's
// interpreter, as the init does (its program on fd 3), beside the same
// program run the plain way, and compares what both print. The engine
// suite's Prestart group compares far more, in the sandbox images.
func TestPrestartersRunTheirProgram(t *testing.T) {
	for _, tc := range []struct {
		language, interpreter, file, code string
	}{
		{"python", "python3", "main.py", "import os, sys\nprint(sys.argv, __name__, __file__, os.getcwd() == sys.argv[-1], os.environ.get('SEEN'))\nraise SystemExit(3)\n"},
		{"javascript", "node", "main.js", "console.log(process.argv.slice(1), require.main === module, process.cwd() === process.argv.at(-1), process.env.SEEN)\nprocess.exitCode = 3\n"},
	} {
		t.Run(tc.language, func(t *testing.T) {
			interp, err := exec.LookPath(tc.interpreter)
			if err != nil {
				t.Skipf("no %s on this host", tc.interpreter)
			}
			dir := t.TempDir()
			file := filepath.Join(dir, tc.file)
			if err := os.WriteFile(file, []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			argv := []string{interp, file, dir}
			env := []string{"SEEN=yes", "PATH=" + os.Getenv("PATH"), "HOME=" + dir}

			plain := exec.Command(argv[0], argv[1:]...)
			plain.Env, plain.Dir = env, dir
			want, wantErr := plain.CombinedOutput()

			pre, err := Prestarter(tc.language, interp, nil)
			if err != nil {
				t.Fatal(err)
			}
			started := exec.Command(pre[0], pre[1:]...)
			started.Env, started.Dir = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SEEN=no"}, os.TempDir()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			started.ExtraFiles = []*os.File{r} // fd 3
			var out bytes.Buffer
			started.Stdout, started.Stderr = &out, &out
			if err := started.Start(); err != nil {
				t.Fatal(err)
			}
			r.Close()
			w.Write(Program(argv, env, dir))
			w.Close()
			gotErr := started.Wait()
			if out.String() != string(want) || exitCode(gotErr) != exitCode(wantErr) || exitCode(gotErr) != 3 {
				t.Errorf("pre-started: %q, exit %d; plain: %q, exit %d", out.String(), exitCode(gotErr), want, exitCode(wantErr))
			}
		})
	}
	if _, err := Prestarter("cobol", "cobc", nil); err == nil {
		t.Error("a pre-starter of COBOL")
	}
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
