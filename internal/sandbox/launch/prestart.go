package launch

import (
	_ "embed"
	"fmt"
	"strconv"
)

// A pre-started interpreter is started by the init ahead of its task, in a
// pooled container, with the modules its image's recipe names imported;
// the task's message then hands it its program through ProgramFD rather
// than starting a process. What it costs a program to notice is in
// docs/prestart.md.

//go:embed prestart.py
var prestartPy string

//go:embed prestart.js
var prestartJS string

// ProgramFD is the descriptor on which a pre-started interpreter reads its
// program (Program), until end of file.
const ProgramFD = 3

// Prestarter is the argv of a pre-started interpreter of language, run
// as command, that loads modules and then waits for its program.
func Prestarter(language, command string, modules []string) ([]string, error) {
	switch language {
	case "python":
		return append([]string{command, "-c", prestartPy}, modules...), nil
	case "javascript":
		return append([]string{command, "-e", prestartJS}, modules...), nil
	}
	return nil, fmt.Errorf("no interpreter of %q can be pre-started", language)
}

// Program is what a pre-started interpreter reads on ProgramFD: the
// working directory, the number of arguments, the arguments (argv[0] is
// the interpreter, argv[1] the program's file) and the environment, each
// ended by a NUL byte but the last. None may hold a NUL byte, which
// neither exec nor a file name can either.
func Program(argv, env []string, dir string) []byte {
	b := append([]byte(dir), 0)
	b = append(strconv.AppendInt(b, int64(len(argv)), 10), 0)
	for _, a := range argv {
		b = append(append(b, a...), 0)
	}
	for _, kv := range env {
		b = append(append(b, kv...), 0)
	}
	return b[:len(b)-1]
}
