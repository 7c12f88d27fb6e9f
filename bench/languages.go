package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/task/run"
)

// hello prints 1 in each language of the built-in images.
var hello = map[string]string{
	"python":     "print(1)",
	"bash":       "echo 1",
	"sh":         "echo 1",
	"javascript": "console.log(1)",
	"typescript": "const one: number = 1\nconsole.log(one)",
	"c":          "#include <stdio.h>\nint main(void) { puts(\"1\"); return 0; }",
	"cpp":        "#include <cstdio>\nint main() { std::puts(\"1\"); }",
}

// languageContenders are a warm hello in each language that base's daemon
// serves and hello has a program for; the others are named and left out.
func languageContenders(ctx context.Context, base *contender) ([]*contender, error) {
	inv, err := base.daemon.client.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	var cs []*contender
	for _, l := range inv.Languages {
		if _, ok := hello[l.Name]; !ok {
			fmt.Fprintf(os.Stderr, "bench: no hello program for language %s; left out\n", l.Name)
			continue
		}
		cs = append(cs, &contender{name: base.name + " " + l.Name, runtime: base.runtime, warm: true, daemon: base.daemon, language: l.Name})
		if l.Name == "python" {
			// The data stack, imported by the program in a fresh
			// interpreter and ahead of it in a pre-started one.
			for _, interp := range []run.Interpreter{run.InterpreterFresh, run.InterpreterPrestarted} {
				cs = append(cs, &contender{name: fmt.Sprintf("%s python numpy+pandas, %s", base.name, interp), runtime: base.runtime, warm: true,
					daemon: base.daemon, language: l.Name, code: "import numpy, pandas\nprint(1)", interp: interp})
			}
		}
	}
	return cs, nil
}
