package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinks follows every relative link of the README and docs/: the
// file it names must exist, and its #fragment must be one of that file's
// headings as GitHub names them, so that a reader who clicks lands there.
func TestDocsLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	// Each file is read once, and its headings made once: links name
	// the same few files many times.
	texts := map[string]string{}
	read := func(file string) (string, error) {
		if text, ok := texts[file]; ok {
			return text, nil
		}
		b, err := os.ReadFile(file)
		texts[file] = string(b)
		return texts[file], err
	}
	headings := map[string]map[string]bool{}
	for _, file := range files {
		text, err := read(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(text) {
			target, fragment, _ := strings.Cut(l.target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", file, l.line, l.target)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if headings[path] == nil {
				linked, _ := read(path)
				headings[path] = anchors(linked)
			}
			if !headings[path][fragment] {
				t.Errorf("%s:%d: link to %s: %s has no heading #%s", file, l.line, l.target, filepath.Base(path), fragment)
			}
		}
	}
}

type docLink struct {
	line   int
	target string
}

// linkRE is an inline link or image, [text](target) or ![alt](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// prose calls f with each line of a Markdown text outside its fenced
// code blocks, and the line's number.
func prose(text string, f func(n int, line string)) {
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		} else if !inFence {
			f(i+1, line)
		}
	}
}

// links are the relative links of a Markdown text outside its code.
func links(text string) []docLink {
	var out []docLink
	prose(text, func(n int, line string) {
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(line), -1) {
			target := m[1]
			if !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				out = append(out, docLink{line: n, target: target})
			}
		}
	})
	return out
}

// stripCode drops a line's `code spans`, where brackets are not links.
func stripCode(line string) string {
	parts := strings.Split(line, "`")
	var b strings.Builder
	for i := 0; i < len(parts); i += 2 {
		b.WriteString(parts[i])
	}
	return b.String()
}

// anchors are the fragments GitHub gives a Markdown text's headings:
// lower case, punctuation dropped, spaces made hyphens, and a repeated
// one numbered -1, -2.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	prose(text, func(_ int, line string) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !strings.HasPrefix(line, "#") || !ok {
			return
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	})
	return out
}
