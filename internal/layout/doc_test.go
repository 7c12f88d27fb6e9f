package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCommentsStartWithTheirName: a declaration's doc comment starts
// with the name it documents, exported or not (staticcheck looks only at
// exported names), tests included. A comment about a group of
// declarations stands apart from them, a blank line between; one that
// names another declaration was left behind when that one moved.
func TestDocCommentsStartWithTheirName(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		check := func(doc *ast.CommentGroup, name *ast.Ident) {
			if doc == nil || name.Name == "_" {
				return
			}
			words := strings.Fields(doc.Text())
			if len(words) > 0 && strings.TrimRight(words[0], ":,.") != name.Name {
				rel, _ := filepath.Rel(root, fset.Position(name.Pos()).Filename)
				t.Errorf("%s:%d: the doc comment of %s starts %q", rel, fset.Position(name.Pos()).Line, name.Name, strings.SplitN(doc.Text(), "\n", 2)[0])
			}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				check(decl.Doc, decl.Name)
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					doc := specDoc(spec)
					if decl.Lparen == token.NoPos {
						doc = decl.Doc
					}
					switch s := spec.(type) {
					case *ast.TypeSpec:
						check(doc, s.Name)
					case *ast.ValueSpec:
						if len(s.Names) == 1 {
							check(doc, s.Names[0])
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// specDoc is the doc comment of one declaration of a group.
func specDoc(spec ast.Spec) *ast.CommentGroup {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		return s.Doc
	case *ast.ValueSpec:
		return s.Doc
	}
	return nil
}
