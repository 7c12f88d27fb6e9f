package task

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

// snapshot is what a session's /workspace holds between calls: each
// entry's type, mode and (for files) content digest, and the digest of
// them all, which a session call's bundle records before and after it.
type snapshot struct {
	entries map[string]snapEntry
	digest  string
}

type snapEntry struct {
	typ    string
	mode   uint32
	sha256 string
	// What says a file is unchanged without reading it again.
	ino, size    int64
	mtime, ctime unix.Timespec
}

// unchangedSince says whether the entry at p is the same in s and before.
func (s snapshot) unchangedSince(before snapshot, p string) bool {
	now, ok := s.entries[p]
	was, had := before.entries[p]
	return ok && had && was.typ == now.typ && was.sha256 == now.sha256 && was.mode == now.mode
}

// takeSnapshot reads /workspace (dir, from the host side, following no
// link) within the output limits, hashing only the files that changed
// since prev.
func takeSnapshot(dir string, prev map[string]snapEntry, lim OutputLimits) (snapshot, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return snapshot{}, fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(root)
	s := snapshot{entries: map[string]snapEntry{}}
	if err := snapWalk(root, ".", 0, prev, lim, s.entries); err != nil && !errors.Is(err, errStop) {
		return snapshot{}, err
	}
	h := sha256.New()
	for _, p := range s.paths() {
		e := s.entries[p]
		fmt.Fprintf(h, "%s\x00%s\x00%o\x00%s\n", p, e.typ, e.mode&0o7777, e.sha256)
	}
	s.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// paths are the snapshot's paths, sorted.
func (s snapshot) paths() []string {
	names := make([]string, 0, len(s.entries))
	for p := range s.entries {
		names = append(names, p)
	}
	slices.Sort(names)
	return names
}

func snapWalk(root int, rel string, depth int, prev map[string]snapEntry, lim OutputLimits, out map[string]snapEntry) error {
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
		e := snapEntry{typ: fileType(st.Mode), mode: st.Mode, ino: int64(st.Ino), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
		switch e.typ {
		case "dir":
			out[p] = e
			if depth+1 < lim.Depth {
				if err := snapWalk(root, p, depth+1, prev, lim, out); err != nil {
					return err
				}
			}
			continue
		case "file":
			if was, ok := prev[p]; ok && was.typ == "file" && was.ino == e.ino && was.size == e.size && was.mtime == e.mtime && was.ctime == e.ctime {
				e.sha256 = was.sha256
			} else if e.sha256, err = hashAt(root, p); err != nil {
				return err
			}
		}
		out[p] = e
	}
	return nil
}

// hashAt is the SHA-256 of the regular file at p below root.
func hashAt(root int, p string) (string, error) {
	_, sum, err := hashFileAt(root, p)
	return sum, err
}

// hashFileAt is the size and SHA-256 of the regular file at p below root,
// reached through no link.
func hashFileAt(root int, p string) (int64, string, error) {
	fd, err := openBelow(root, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
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
