package tools

import (
	"embed"
	"io/fs"
	"strings"
)

// lib is the library programs call tools with, by language.
//
//go:embed lib
var lib embed.FS

// LibraryFile is a file of the library inside the sandbox.
type LibraryFile struct {
	Path    string // relative to the program's folder
	Content []byte
}

// Library is the library for the program's folder: the Python package
// sandboxd (found next to the program, or through PYTHONPATH) and the
// Node.js module sandboxd (in node_modules, or through NODE_PATH).
func Library() []LibraryFile {
	var out []LibraryFile
	for _, l := range []struct{ from, to string }{{"lib/python", ""}, {"lib/node", "node_modules/"}} {
		_ = fs.WalkDir(lib, l.from, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := lib.ReadFile(p)
			out = append(out, LibraryFile{Path: l.to + strings.TrimPrefix(p, l.from+"/"), Content: b})
			return err
		})
	}
	return out
}
