package taskdir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/artifacts"
)

// OutputLimits bound what is collected from a task's /workspace.
type OutputLimits struct {
	// Files caps the files whose content goes into the bundle.
	Files int
	// Bytes caps their total size.
	Bytes int64
	// Entries caps how many entries are listed at all; the walk stops there.
	Entries int
	// Depth caps how deep the walk goes.
	Depth int
}

// DefaultOutputLimits are the limits of a daemon started without flags.
func DefaultOutputLimits() OutputLimits {
	return OutputLimits{Files: 1000, Bytes: 64 << 20, Entries: 10000, Depth: 32}
}

// Collected is what a walk of the workspace found: every entry listed,
// the files that go into the bundle, and whether the listing stopped at
// its limit. Its sources read below the workspace until Close.
type Collected struct {
	Outputs   []artifacts.Output
	Sources   []artifacts.Source
	Truncated bool
	root      int // the workspace's folder, open until Close
}

// Close ends the reading of the sources.
func (c *Collected) Close() {
	if c.root >= 0 {
		unix.Close(c.root)
		c.root = -1
	}
}

// listBelow opens the folder rel below root and reads at most most of its
// names, sorted.
func listBelow(root int, rel string, most int) (*os.File, []string, error) {
	fd, err := OpenBelow(root, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", rel, err)
	}
	d := os.NewFile(uintptr(fd), rel)
	names, err := d.Readdirnames(most)
	if err != nil && !errors.Is(err, io.EOF) {
		d.Close()
		return nil, nil, fmt.Errorf("list %s: %w", rel, err)
	}
	slices.Sort(names)
	return d, names, nil
}

// Collect lists what a stopped task left in its workspace, from the
// host side. It never follows a link and reads nothing but regular files;
// links, FIFOs, sockets and devices are recorded by name and type. Files go
// into the bundle up to lim and budget bytes; the rest are listed with the
// reason they were left out. Files for which unchanged is true (a session
// call's that it did not change) are listed, not stored: the bundle of the
// call that last changed them has them.
func Collect(dir string, lim OutputLimits, budget int64, unchanged func(p string) bool) (*Collected, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	c := &Collected{root: root}
	w := walker{c: c, lim: lim, budget: min(budget, lim.Bytes), unchanged: unchanged}
	if err := w.walk(".", 0); err != nil && !errors.Is(err, errStop) {
		c.Close()
		return nil, err
	}
	return c, nil
}

var errStop = errors.New("listing limit reached")

type walker struct {
	c      *Collected
	lim    OutputLimits
	budget int64
	files  int
	// unchanged, when set, leaves out the files a session call kept.
	unchanged func(p string) bool
}

// walk lists the folder rel (relative to the workspace), sorted by name.
func (w *walker) walk(rel string, depth int) error {
	// Read no more names than may still be listed.
	d, names, err := listBelow(w.c.root, rel, w.lim.Entries-len(w.c.Outputs)+1)
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	for _, name := range names {
		if len(w.c.Outputs) >= w.lim.Entries {
			w.c.Truncated = true
			return errStop
		}
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", escapeName(p), err)
		}
		out := artifacts.Output{Path: p, Type: fileType(st.Mode)}
		if !utf8.ValidString(p) {
			// No manifest or result can carry such a name: it is listed
			// escaped, and neither stored nor walked into.
			out.Path, out.Omitted = escapeName(p), "its name is not UTF-8: not collected"
			w.c.Outputs = append(w.c.Outputs, out)
			continue
		}
		switch out.Type {
		case "dir":
			w.c.Outputs = append(w.c.Outputs, out)
			if depth+1 >= w.lim.Depth {
				w.c.Outputs[len(w.c.Outputs)-1].Omitted = fmt.Sprintf("deeper than %d folders: not listed", w.lim.Depth)
				continue
			}
			if err := w.walk(p, depth+1); err != nil {
				return err
			}
			continue
		case "file":
			out.Size = st.Size
			switch {
			case w.unchanged != nil && w.unchanged(p):
				out.Omitted = "unchanged by this call: stored in the session's earlier bundles"
			case w.files >= w.lim.Files:
				out.Omitted = fmt.Sprintf("past the first %d files", w.lim.Files)
			case st.Size > w.budget:
				out.Omitted = "past the bundle's byte limit for output files"
			default:
				w.files++
				w.budget -= st.Size
				w.c.Sources = append(w.c.Sources, w.source(p, st))
			}
		}
		w.c.Outputs = append(w.c.Outputs, out)
	}
	return nil
}

// source reads the file at p when the bundle is written, checking that it
// is still the regular file of the same size that the walk saw.
func (w *walker) source(p string, seen unix.Stat_t) artifacts.Source {
	root := w.c.root
	return artifacts.Source{
		Path:       artifacts.DirOutput + "/" + p,
		Size:       seen.Size,
		Executable: seen.Mode&0o111 != 0,
		Open: func() (io.ReadCloser, error) {
			fd, err := OpenBelow(root, p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", p, err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != seen.Ino || st.Size != seen.Size {
				unix.Close(fd)
				return nil, fmt.Errorf("%s changed after the task stopped", p)
			}
			return os.NewFile(uintptr(fd), p), nil
		},
	}
}

// escapeName writes the bytes of a name that are not UTF-8 as \xNN.
func escapeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, "\\x%02x", name[i])
		} else {
			b.WriteString(name[i : i+size])
		}
		i += size
	}
	return b.String()
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "other"
}
