package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Report is what Verify found sound.
type Report struct {
	// Files are the files read, oldest first.
	Files []string
	Lines int
	// FirstSeq is the first line's number: above 1 when older files were
	// rotated away. LastSeq and LastHash are the chain's head, which a
	// copy kept elsewhere can be checked against (the chain alone cannot
	// tell a last line edited, or the last lines cut, from a shorter log).
	FirstSeq, LastSeq uint64
	LastHash          string
}

// Problem is where the chain breaks.
type Problem struct {
	File string
	Line int // in File, from 1
	What string
}

func (p *Problem) Error() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.What) }

// Verify checks the chain of the log at path and of its rotated files
// (path.N ... path.1, oldest first): every line is whole and parses, its
// number is one more than the line's before, and it carries the SHA-256
// of that line; the log's first line carries the genesis hash. It
// returns the first Problem found.
func Verify(path string) (Report, error) {
	files, err := chainFiles(path)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Files: files}
	var prevHash string
	var prevSeq uint64
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return rep, err
		}
		r := bufio.NewReader(f)
		for n := 1; ; n++ {
			b, err := r.ReadBytes('\n')
			if errors.Is(err, io.EOF) && len(b) == 0 {
				break
			}
			bad := func(format string, args ...any) error {
				f.Close()
				return &Problem{File: file, Line: n, What: fmt.Sprintf(format, args...)}
			}
			if errors.Is(err, io.EOF) {
				return rep, bad("the line is cut short (no newline): a write that did not finish, or a cut")
			}
			if err != nil {
				f.Close()
				return rep, err
			}
			b = bytes.TrimSuffix(b, []byte("\n"))
			var ln struct {
				Seq  uint64 `json:"seq"`
				Prev string `json:"prev"`
			}
			if err := json.Unmarshal(b, &ln); err != nil || ln.Seq == 0 {
				return rep, bad("not a line of the audit log: %v", err)
			}
			switch {
			case rep.Lines == 0 && ln.Seq == 1 && ln.Prev != genesis:
				return rep, bad("the log's first line does not start the chain (prev %s)", ln.Prev)
			case rep.Lines == 0:
				// The oldest line kept: older ones may have been rotated away.
				rep.FirstSeq = ln.Seq
			case ln.Seq != prevSeq+1:
				return rep, bad("line number %d follows %d: a line was deleted, inserted or moved", ln.Seq, prevSeq)
			case ln.Prev != prevHash:
				return rep, bad("line %d does not carry the hash of line %d: that line, or this one, was changed", ln.Seq, prevSeq)
			}
			sum := sha256.Sum256(b)
			prevHash, prevSeq = hex.EncodeToString(sum[:]), ln.Seq
			rep.Lines++
		}
		f.Close()
	}
	rep.LastSeq, rep.LastHash = prevSeq, prevHash
	switch {
	case rep.Lines == 0:
		return rep, fmt.Errorf("%s holds no audit line", path)
	case len(files) == 1 && rep.FirstSeq != 1:
		// Rotation leaves path.1: without one, nothing was rotated away.
		return rep, &Problem{File: path, Line: 1, What: fmt.Sprintf("the log starts at line %d, with no rotated file before it: its first lines were deleted", rep.FirstSeq)}
	}
	return rep, nil
}

// chainFiles are path's rotated files, oldest first, then path.
func chainFiles(path string) ([]string, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, err
	}
	type numbered struct {
		n    int
		file string
	}
	var rot []numbered
	for _, m := range matches {
		if n, err := strconv.Atoi(strings.TrimPrefix(m, path+".")); err == nil && n > 0 {
			rot = append(rot, numbered{n, m})
		}
	}
	slices.SortFunc(rot, func(a, b numbered) int { return b.n - a.n })
	var files []string
	for _, r := range rot {
		files = append(files, r.file)
	}
	return append(files, path), nil
}

// globEscape quotes the characters of a path that Glob would take as a
// pattern.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
