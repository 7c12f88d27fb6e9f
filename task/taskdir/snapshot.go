package taskdir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// Snapshot is what a session's /workspace holds between calls: each
// entry's type, mode and (for files) content digest, and the digest of
// them all, which a session call's bundle records before and after it.
type Snapshot struct {
	entries map[string]Entry
	// Digest covers every entry's path, type, mode and content digest.
	Digest string
}

// Entry is one path of a Snapshot.
type Entry struct {
	Type   string // as artifacts.Output.Type
	Mode   uint32
	SHA256 string // of a file's content
	Size   int64
	// What says a file is unchanged without reading it again.
	ino          int64
	mtime, ctime unix.Timespec
}

// UnchangedSince says whether the entry at p is the same in s and before.
func (s Snapshot) UnchangedSince(before Snapshot, p string) bool {
	now, ok := s.entries[p]
	was, had := before.entries[p]
	return ok && had && was.Type == now.Type && was.SHA256 == now.SHA256 && was.Mode == now.Mode
}

// Entry is what s holds at p.
func (s Snapshot) Entry(p string) (Entry, bool) {
	e, ok := s.entries[p]
	return e, ok
}

// TakeSnapshot reads /workspace (dir, from the host side, following no
// link) within the output limits, hashing only the files that changed
// since prev (the zero Snapshot for none).
func TakeSnapshot(dir string, prev Snapshot, lim OutputLimits) (Snapshot, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Snapshot{}, fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(root)
	s := Snapshot{entries: map[string]Entry{}}
	if err := snapWalk(root, ".", 0, prev.entries, lim, s.entries); err != nil && !errors.Is(err, errStop) {
		return Snapshot{}, err
	}
	h := sha256.New()
	for _, p := range s.Paths() {
		e := s.entries[p]
		fmt.Fprintf(h, "%s\x00%s\x00%o\x00%s\n", p, e.Type, e.Mode&0o7777, e.SHA256)
	}
	s.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// Paths are the snapshot's paths, sorted.
func (s Snapshot) Paths() []string {
	names := make([]string, 0, len(s.entries))
	for p := range s.entries {
		names = append(names, p)
	}
	slices.Sort(names)
	return names
}

func snapWalk(root int, rel string, depth int, prev map[string]Entry, lim OutputLimits, out map[string]Entry) error {
	d, names, err := listBelow(root, rel, lim.Entries-len(out)+1)
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	for _, name := range names {
		if len(out) >= lim.Entries {
			return errStop
		}
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", escapeName(p), err)
		}
		e := Entry{Type: fileType(st.Mode), Mode: st.Mode, ino: int64(st.Ino), Size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
		switch e.Type {
		case "dir":
			out[p] = e
			if depth+1 < lim.Depth {
				if err := snapWalk(root, p, depth+1, prev, lim, out); err != nil {
					return err
				}
			}
			continue
		case "file":
			if was, ok := prev[p]; ok && was.Type == "file" && was.ino == e.ino && was.Size == e.Size && was.mtime == e.mtime && was.ctime == e.ctime {
				e.SHA256 = was.SHA256
			} else if e.SHA256, err = hashAt(root, p); err != nil {
				return err
			}
		}
		out[p] = e
	}
	return nil
}

// hashAt is the SHA-256 of the regular file at p below root.
func hashAt(root int, p string) (string, error) {
	_, sum, err := HashFileAt(root, p)
	return sum, err
}

// HashFileAt is the size and SHA-256 of the regular file at p below root,
// reached through no link.
func HashFileAt(root int, p string) (int64, string, error) {
	fd, err := OpenBelow(root, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return 0, "", fmt.Errorf("open %s: %w", escapeName(p), err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", escapeName(p))
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", escapeName(p), err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
