package run

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func code(c string) *Program { return &Program{Language: "python", Code: c} }

func TestRequestValidate(t *testing.T) {
	b := DefaultBounds()
	b.CodeBytes = 64
	b.Files = 3
	b.FilesBytes = 100
	b.StdinBytes = 10
	tests := []struct {
		name      string
		req       Request
		wantField string // the field the error must name; "" for a valid request
	}{
		{name: "valid code", req: Request{Program: code("print(1)")}},
		{name: "valid argv", req: Request{Command: &Command{Argv: []string{"ls", "-la"}}}},
		{name: "valid shell", req: Request{Command: &Command{Shell: "ls | wc"}}},
		{name: "neither", req: Request{}, wantField: "request"},
		{name: "both", req: Request{Program: code("x"), Command: &Command{Shell: "x"}}, wantField: "request"},
		{name: "empty code", req: Request{Program: code("")}, wantField: "code"},
		{name: "code over the limit", req: Request{Program: code(strings.Repeat("x", 65))}, wantField: "code"},
		{name: "NUL in code", req: Request{Program: code("a\x00b")}, wantField: "code"},
		{name: "empty command", req: Request{Command: &Command{}}, wantField: "argv"},
		{name: "argv and shell", req: Request{Command: &Command{Argv: []string{"ls"}, Shell: "ls"}}, wantField: "argv"},
		{name: "empty argv[0]", req: Request{Command: &Command{Argv: []string{""}}}, wantField: "argv[0]"},
		{name: "NUL in argv", req: Request{Command: &Command{Argv: []string{"ls", "a\x00"}}}, wantField: "argv[1]"},
		{name: "NUL in shell", req: Request{Command: &Command{Shell: "ls\x00"}}, wantField: "shell"},
		{name: "file with ..", req: withFiles("../etc/passwd"), wantField: "files[0].path"},
		{name: "file with inner ..", req: withFiles("a/../../b"), wantField: "files[0].path"},
		{name: "absolute file", req: withFiles("/etc/passwd"), wantField: "files[0].path"},
		{name: "NUL in file name", req: withFiles("a\x00b"), wantField: "files[0].path"},
		{name: "empty file name", req: withFiles(""), wantField: "files[0].path"},
		{name: "unclean file name", req: withFiles("a//b"), wantField: "files[0].path"},
		{name: "dot file name", req: withFiles("./a"), wantField: "files[0].path"},
		{name: "duplicate file", req: withFiles("a", "b", "a"), wantField: "files[2].path"},
		{name: "file below a file", req: withFiles("a", "a/b"), wantField: "files[1].path"},
		{name: "long name", req: withFiles(strings.Repeat("n", 256)), wantField: "files[0].path"},
		{name: "deep path", req: withFiles(strings.Repeat("d/", 40) + "f"), wantField: "files[0].path"},
		{name: "too many files", req: withFiles("a", "b", "c", "d"), wantField: "files"},
		{name: "files too large", req: Request{Program: code("x"), Options: Options{Files: []File{{Path: "a", Content: make([]byte, 101)}}}}, wantField: "files"},
		{name: "nested files are fine", req: withFiles("a/b/c", "a/b/d", "e")},
		{name: "duplicate mount", req: Request{Program: code("x"), Options: Options{Mounts: []string{"data", "data"}}}, wantField: "mounts[1]"},
		{name: "bad env name", req: Request{Program: code("x"), Options: Options{Env: map[string]string{"A-B": "1"}}}, wantField: "env"},
		{name: "NUL in env", req: Request{Program: code("x"), Options: Options{Env: map[string]string{"A": "\x00"}}}, wantField: "env[A]"},
		{name: "stdin too large", req: Request{Program: code("x"), Options: Options{Stdin: make([]byte, 11)}}, wantField: "stdin"},
		{name: "workdir outside", req: Request{Program: code("x"), Options: Options{Workdir: "/etc"}}, wantField: "workdir"},
		{name: "workdir escaping", req: Request{Program: code("x"), Options: Options{Workdir: "a/../../etc"}}, wantField: "workdir"},
		{name: "workdir prefix trick", req: Request{Program: code("x"), Options: Options{Workdir: "/workspace-evil"}}, wantField: "workdir"},
		{name: "workdir relative", req: Request{Program: code("x"), Options: Options{Workdir: "sub/dir"}}},
		{name: "bad label", req: Request{Program: code("x"), Options: Options{Labels: map[string]string{"-x": "1"}}}, wantField: "labels"},
		{name: "tools", req: Request{Program: code("x"), Options: Options{Tools: []string{"orders.search", "files.*", "*"}}}},
		{name: "bad tool pattern", req: Request{Program: code("x"), Options: Options{Tools: []string{"orders.*", "orders.["}}}, wantField: "tools[1]"},
		{name: "empty tool pattern", req: Request{Program: code("x"), Options: Options{Tools: []string{""}}}, wantField: "tools[0]"},
		{name: "too many tools", req: Request{Program: code("x"), Options: Options{Tools: make([]string, 65)}}, wantField: "tools"},
		{name: "tools in a session's call", req: Request{Program: code("x"), Options: Options{Tools: []string{"*"}, SessionID: "s"}}},
		{name: "tools pre-started", req: Request{Program: code("x"), Options: Options{Tools: []string{"*"}, Interpreter: InterpreterPrestarted}}, wantField: "tools"},
		{name: "a record without tools", req: Request{Program: code("x"), Options: Options{ToolRecord: []byte("{}")}}, wantField: "tool_record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate(b)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate() = nil, want an error naming %s", tt.wantField)
			}
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("validate() = %v, not an invalid argument", err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantField+":") {
				t.Fatalf("validate() = %q, want it to start with %q", err, tt.wantField+":")
			}
		})
	}
}

func withFiles(paths ...string) Request {
	r := Request{Program: code("x")}
	for _, p := range paths {
		r.Options.Files = append(r.Options.Files, File{Path: p, Content: []byte("c")})
	}
	return r
}

func TestResolveWorkdir(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/workspace"},
		{"/workspace", "/workspace"},
		{"/workspace/", "/workspace"},
		{"out", "/workspace/out"},
		{"/workspace/a/b", "/workspace/a/b"},
		{"./a", "/workspace/a"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ResolveWorkdir(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ResolveWorkdir(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
