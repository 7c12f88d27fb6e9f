package launch

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestRoundTripLeavesTheRestOfTheStream(t *testing.T) {
	want := Spec{Argv: []string{"python3", "/code/main.py"}, Env: []string{"A=1"}, Dir: "/workspace", Nproc: 32}
	buf, err := Input(want, strings.NewReader("the program's stdin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Argv, want.Argv) || got.Dir != want.Dir || got.Nproc != 32 || !slices.Equal(got.Env, want.Env) {
		t.Fatalf("Read() = %+v", got)
	}
	if rest, _ := io.ReadAll(buf); string(rest) != "the program's stdin" {
		t.Fatalf("Read() took more than its message: %q is left", rest)
	}
}

func TestReadRefusesBadMessages(t *testing.T) {
	for name, in := range map[string]string{
		"empty":     "",
		"truncated": "\x00\x00\x00\x10{}",
		"huge":      "\x7f\xff\xff\xff",
		"not json":  "\x00\x00\x00\x02no",
		"no argv":   "\x00\x00\x00\x02{}",
	} {
		if _, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("%s: Read() accepted it", name)
		}
	}
}
