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
	return pairwise("line", lines(got), lines(want), func(g, w []byte) string {
		if bytes.Equal(g, w) {
			return ""
		}
		return fmt.Sprintf("expected %s, got %s", excerpt(w), excerpt(g))
	})
}

// pairwise holds got's parts against want's in turn: the first pair that
// differ (differ says how), or a part either lacks, is where the output
// fails, named by unit and number.
func pairwise(unit string, got, want [][]byte, differ func(g, w []byte) string) (bool, string) {
	for i := 0; i < max(len(got), len(want)); i++ {
		why := ""
		switch {
		case i >= len(got):
			why = fmt.Sprintf("expected %s, got the end of the output", excerpt(want[i]))
		case i >= len(want):
			why = fmt.Sprintf("expected the end of the output, got %s", excerpt(got[i]))
		default:
			why = differ(got[i], want[i])
		}
		if why != "" {
			return false, fmt.Sprintf("%s %d: %s", unit, i+1, why)
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
	return pairwise("token", bytes.Fields(got), bytes.Fields(want), func(g, w []byte) string {
		x, xerr := strconv.ParseFloat(string(w), 64)
		if xerr != nil {
			if bytes.Equal(g, w) {
				return ""
			}
			return fmt.Sprintf("expected %s, got %s", excerpt(w), excerpt(g))
		}
		y, err := strconv.ParseFloat(string(g), 64)
		if err == nil && (x == y || math.IsNaN(x) && math.IsNaN(y)) {
			return ""
		}
		if err != nil || math.IsNaN(y) || !(math.Abs(y-x) <= c.Absolute+c.Relative*math.Abs(x)) {
			return fmt.Sprintf("expected %s (within %g + %g×|expected|), got %s", excerpt(w), c.Absolute, c.Relative, excerpt(g))
		}
		return ""
	})
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
