package direct

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// unpack writes the layer tar r into the new folder root: files, folders,
// links and device nodes with their owners, modes, extended attributes
// and times. Nothing is written outside root: a name that climbs out, or
// whose folder is a symbolic link, is refused, and no link is followed.
// Whiteouts have no meaning in a first layer and are refused.
func unpack(r io.Reader, root string) error {
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	u := unpacker{root: root, dirs: map[string]bool{"": true}}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
	// A folder's time is set once nothing more is written in it.
	for i := len(u.times) - 1; i >= 0; i-- {
		t := u.times[i]
		ts := []unix.Timespec{unix.NsecToTimespec(t.at.UnixNano()), unix.NsecToTimespec(t.at.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, t.path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

type unpacker struct {
	root string
	// dirs are the folders, by name in the layer, known to be folders
	// this unpack made (never links).
	dirs  map[string]bool
	times []entryTime
}

type entryTime struct {
	path string
	at   time.Time
}

func (u *unpacker) entry(hdr *tar.Header, body io.Reader) error {
	name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
	if name == "" {
		return nil // the root itself
	}
	base := path.Base(name)
	if strings.HasPrefix(base, ".wh.") {
		return fmt.Errorf("a whiteout in a first layer")
	}
	if err := u.parent(path.Dir(name)); err != nil {
		return err
	}
	dst := filepath.Join(u.root, name)
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !u.dirs[name] {
			if err := os.Mkdir(dst, 0o700); err != nil {
				return err
			}
			u.dirs[name] = true
		}
	case tar.TypeReg:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, dst); err != nil {
			return err
		}
	case tar.TypeLink:
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		if err := u.parent(path.Dir(target)); err != nil {
			return fmt.Errorf("hard link to %s: %w", hdr.Linkname, err)
		}
		// linkat without AT_SYMLINK_FOLLOW links the name itself.
		if err := os.Link(filepath.Join(u.root, target), dst); err != nil {
			return err
		}
		return nil // the link shares its target's owner, mode and times
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		if err := unix.Mknod(dst, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return err
		}
	default:
		return fmt.Errorf("entry type %q is not unpacked", hdr.Typeflag)
	}
	if err := os.Lchown(dst, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		if attr, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if err := unix.Lsetxattr(dst, attr, []byte(v), 0); err != nil {
				return fmt.Errorf("extended attribute %s: %w", attr, err)
			}
		}
	}
	// The mode after the owner: chown clears the set-user-ID bit. A
	// symbolic link has no mode of its own.
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, mode, 0); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		u.times = append(u.times, entryTime{dst, hdr.ModTime})
		return nil
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// parent checks that the folder dir of the layer is one this unpack made,
// every folder above it too: a name under a symbolic link, or under
// something that is no folder, is refused.
func (u *unpacker) parent(dir string) error {
	if dir == "." {
		return nil
	}
	if u.dirs[dir] {
		return nil
	}
	if err := u.parent(path.Dir(dir)); err != nil {
		return err
	}
	st, err := os.Lstat(filepath.Join(u.root, dir))
	if err != nil || !st.IsDir() {
		return fmt.Errorf("its folder %s is not a folder of the layer", dir)
	}
	u.dirs[dir] = true
	return nil
}
