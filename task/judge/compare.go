package judge

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Match holds got, a case's stdout, against want by c; when they differ it
// says where, in one line a person can act on.
func Match(c Compare, got, want []byte) (ok bool, why string) {
	switch c.Kind {
	case CompareExact:
		if bytes.Equal(got, want) {
			return true, ""
		}
		at := commonPrefix(got, want)
		line := bytes.Count(want[:at], []byte("\n")) + 1
		return false, fmt.Sprintf("byte %d (line %d) differs: expected %s, got %s", at, line, excerpt(want[at:]), excerpt(got[at:]))
	case CompareNumbers:
		return matchNumbers(c, got, want)
	}
	g, w := lines(got), lines(want)
	for i := 0; i < max(len(g), len(w)); i++ {
		switch {
		case i >= len(g):
			return false, fmt.Sprintf("line %d: expected %s, got the end of the output", i+1, excerpt(w[i]))
		case i >= len(w):
			return false, fmt.Sprintf("line %d: expected the end of the output, got %s", i+1, excerpt(g[i]))
		case !bytes.Equal(g[i], w[i]):
			return false, fmt.Sprintf("line %d: expected %s, got %s", i+1, excerpt(w[i]), excerpt(g[i]))
		}
	}
	return true, ""
}

// lines splits b into lines without their trailing whitespace, the
// trailing empty lines dropped.
func lines(b []byte) [][]byte {
	ls := bytes.Split(b, []byte("\n"))
	for i := range ls {
		ls[i] = bytes.TrimRight(ls[i], " \t\r\v\f")
	}
	for len(ls) > 0 && len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

func matchNumbers(c Compare, got, want []byte) (bool, string) {
	g, w := bytes.Fields(got), bytes.Fields(want)
	for i := 0; i < max(len(g), len(w)); i++ {
		switch {
		case i >= len(g):
			return false, fmt.Sprintf("token %d: expected %s, got the end of the output", i+1, excerpt(w[i]))
		case i >= len(w):
			return false, fmt.Sprintf("token %d: expected the end of the output, got %s", i+1, excerpt(g[i]))
		}
		x, xerr := strconv.ParseFloat(string(w[i]), 64)
		if xerr != nil {
			if !bytes.Equal(g[i], w[i]) {
				return false, fmt.Sprintf("token %d: expected %s, got %s", i+1, excerpt(w[i]), excerpt(g[i]))
			}
			continue
		}
		y, err := strconv.ParseFloat(string(g[i]), 64)
		switch {
		case err == nil && math.IsNaN(x) && math.IsNaN(y), err == nil && x == y:
			continue
		}
		if err != nil || math.IsNaN(y) || !(math.Abs(y-x) <= c.Absolute+c.Relative*math.Abs(x)) {
			return false, fmt.Sprintf("token %d: expected %s (within %g + %g×|expected|), got %s", i+1, excerpt(w[i]), c.Absolute, c.Relative, excerpt(g[i]))
		}
	}
	return true, ""
}

// NotANumber returns the first whitespace-separated token of b that is
// not a number, for refusing a tolerance on it; ok when there is none.
func NotANumber(b []byte) (token string, ok bool) {
	for _, f := range bytes.Fields(b) {
		if _, err := strconv.ParseFloat(string(f), 64); err != nil {
			return string(f), false
		}
	}
	return "", true
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// excerpt quotes the start of b for a message: at most 40 bytes, cut at
// a line's end, "nothing" when empty.
func excerpt(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i < 40 {
		b = b[:i+1]
	}
	if len(b) > 40 {
		cut := 40
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return strconv.Quote(string(b[:cut])) + "…"
	}
	return strconv.Quote(string(b))
}
