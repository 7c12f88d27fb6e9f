package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLog records n events in a new log at dir/audit.log.
func writeLog(t *testing.T, dir string, n int, opts Options) string {
	t.Helper()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Record(Event{Kind: KindDecision, Tenant: "team-a", Decision: Accepted, RunID: strings.Repeat("r", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func lines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

func TestVerifyPassesOnAWholeLog(t *testing.T) {
	path := writeLog(t, t.TempDir(), 5, Options{})
	rep, err := Verify(path)
	if err != nil || rep.Lines != 5 || rep.FirstSeq != 1 || rep.LastSeq != 5 || len(rep.LastHash) != 64 {
		t.Fatalf("Verify() = %+v, %v", rep, err)
	}
}

// TestVerifyFindsEachKindOfTampering: an edit, a deletion, an insertion
// and a reordering each break the chain where they were made.
func TestVerifyFindsEachKindOfTampering(t *testing.T) {
	for name, tc := range map[string]struct {
		tamper func(ls [][]byte) [][]byte
		want   string
	}{
		"edited": {func(ls [][]byte) [][]byte {
			ls[2] = bytes.Replace(ls[2], []byte(`"tenant":"team-a"`), []byte(`"tenant":"team-b"`), 1)
			return ls
		}, "line 4 does not carry the hash of line 3"},
		"deleted":       {func(ls [][]byte) [][]byte { return append(ls[:2:2], ls[3:]...) }, "line number 4 follows 2"},
		"deleted first": {func(ls [][]byte) [][]byte { return ls[1:] }, "its first lines were deleted"},
		"inserted": {func(ls [][]byte) [][]byte {
			return append(append(ls[:3:3], ls[1]), ls[3:]...)
		}, "line number 2 follows 3"},
		"reordered":  {func(ls [][]byte) [][]byte { ls[1], ls[3] = ls[3], ls[1]; return ls }, "line number 4 follows 1"},
		"not a line": {func(ls [][]byte) [][]byte { ls[1] = []byte("hello\n"); return ls }, "not a line of the audit log"},
		"cut short":  {func(ls [][]byte) [][]byte { ls[4] = ls[4][:10]; return ls }, "cut short"},
		"new genesis": {func(ls [][]byte) [][]byte {
			ls[0] = bytes.Replace(ls[0], []byte(`"prev":"00`), []byte(`"prev":"01`), 1)
			return ls
		}, "does not start the chain"},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeLog(t, t.TempDir(), 5, Options{})
			ls := tc.tamper(lines(t, path))
			if err := os.WriteFile(path, bytes.Join(ls, nil), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Verify(path)
			var p *Problem
			if !errors.As(err, &p) || !strings.Contains(p.What, tc.want) {
				t.Fatalf("Verify() = %v, want a problem with %q", err, tc.want)
			}
		})
	}
}

// TestRotationKeepsTheChain: past MaxBytes the log goes on in a new file
// whose first line carries the hash of the rotated file's last; Keep
// bounds the rotated files, and the oldest kept starts past line 1.
func TestRotationKeepsTheChain(t *testing.T) {
	dir := t.TempDir()
	path := writeLog(t, dir, 40, Options{MaxBytes: 1500, Keep: 2})
	rep, err := Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != 3 || rep.LastSeq != 40 || rep.FirstSeq <= 1 || rep.Lines != int(rep.LastSeq-rep.FirstSeq+1) {
		t.Fatalf("Verify() = %+v; want 3 files, lines up to 40, the first ones rotated away", rep)
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a third rotated file was kept: %v", err)
	}
	// A line edited in a rotated file breaks the chain at the next file.
	ls := lines(t, path+".1")
	last := len(ls) - 1
	ls[last] = bytes.Replace(ls[last], []byte(`"decision":"accepted"`), []byte(`"decision":"refused"`), 1)
	if err := os.WriteFile(path+".1", bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	var p *Problem
	if _, err := Verify(path); !errors.As(err, &p) || p.File != path || p.Line != 1 {
		t.Fatalf("Verify() after an edit of %s.1's last line = %v; want a problem at %s:1", path, err, path)
	}
}

// TestOpenGoesOnWithTheChain: a reopened log, one whose last line was cut
// short by a kill, and one just rotated, all go on where the chain ends.
func TestOpenGoesOnWithTheChain(t *testing.T) {
	dir := t.TempDir()
	path := writeLog(t, dir, 3, Options{})
	// A daemon killed mid-write leaves part of a line.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":4,"prev":"ab`)
	f.Close()
	l, err := Open(path, Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(Event{Kind: KindSession, Tenant: "operator", SessionID: "s1", Session: "created"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep, err := Verify(path)
	if err != nil || rep.LastSeq != 4 {
		t.Fatalf("after a cut line and a reopen: Verify() = %+v, %v; want 4 sound lines", rep, err)
	}
	// Rotated with nothing written since: the new file follows FILE.1.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Kind: KindDecision, Tenant: "operator", Decision: Refused, Code: "INVALID_ARGUMENT"})
	l.Close()
	if rep, err := Verify(path); err != nil || rep.LastSeq != 5 || len(rep.Files) != 2 {
		t.Fatalf("after a reopen past a rotation: Verify() = %+v, %v", rep, err)
	}
}

func TestOpenRefusesAFileThatIsNotALog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	os.WriteFile(path, []byte("not json\n"), 0o600)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "line at byte 0") {
		t.Fatalf("Open() = %v, want a refusal naming the line", err)
	}
}

// TestOpenMakesItsFolder: a log in a folder that does not exist yet is
// made, with the folder root's alone.
func TestOpenMakesItsFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "log", "sandboxd", "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(filepath.Dir(path))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the folder: %v %v, want mode 0700", st.Mode(), err)
	}
}
