package tools

import (
	"embed"
	"io/fs"
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
// sandboxd (found next to the program, or through PYTHONPATH).
func Library() []LibraryFile {
	var out []LibraryFile
	_ = fs.WalkDir(lib, "lib/python", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := lib.ReadFile(p)
		out = append(out, LibraryFile{Path: p[len("lib/python/"):], Content: b})
		return err
	})
	return out
}
