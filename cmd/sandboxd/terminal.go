package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable makes text that came from a program or a bundle safe to print
// on a terminal: control characters (escape sequences among them, which
// write to the clipboard, erase lines or move the cursor), bytes that are
// not UTF-8, and the characters that reorder text (bidirectional
// overrides) are shown escaped, as \x1b or \u202e. With multiline, line
// breaks and tabs are kept; without, they are escaped too.
func printable(s string, multiline bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unicode.IsControl(r) || reorders(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// reorders says whether r changes how a terminal orders or breaks text.
func reorders(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
