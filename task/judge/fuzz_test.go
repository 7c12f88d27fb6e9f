package judge

import (
	"bytes"
	"testing"
)

// FuzzMatch: a program's output, any bytes, never panics the comparison,
// and every comparison accepts the expected output itself.
func FuzzMatch(f *testing.F) {
	f.Add([]byte("1 2\n"), []byte("1 2"), 0.5)
	f.Add([]byte("\xff\xfe\n\n"), []byte("é"), 0.0)
	f.Add([]byte("1e308 -1e308 NaN Inf"), []byte("1e308 0x10"), 1e-9)
	f.Fuzz(func(t *testing.T, got, want []byte, tol float64) {
		for _, k := range []CompareKind{CompareLines, CompareExact, CompareNumbers} {
			c := Compare{Kind: k}
			if k == CompareNumbers && tol >= 0 {
				c.Absolute = tol
			}
			Match(c, got, want)
			if ok, why := Match(c, want, want); !ok {
				t.Fatalf("%s: the expected output %q is not accepted: %s", k, want, why)
			}
			if ok, _ := Match(c, got, want); k == CompareExact && ok != bytes.Equal(got, want) {
				t.Fatalf("exact: %q and %q: %v", got, want, ok)
			}
		}
	})
}
