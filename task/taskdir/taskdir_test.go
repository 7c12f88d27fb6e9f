package taskdir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRemoveGivesBackInReverseOnceTheFoldersAreGone(t *testing.T) {
	root := t.TempDir()
	d, err := Create(FolderDisk{}, root, "run1", uint32(os.Getuid()), Sizes{Disk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, name := range []string{"uid", "egress"} {
		d.OnRemove(func() error {
			if _, err := os.Stat(filepath.Join(root, "run1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s given back while the folders exist: %v", name, err)
			}
			order = append(order, name)
			return nil
		})
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"egress", "uid"}) {
		t.Fatalf("given back in the order %q, want egress then uid", order)
	}
	if err := d.Remove(); err != nil || len(order) != 2 {
		t.Fatalf("a second Remove gave back again (%q) or failed: %v", order, err)
	}
}

func TestCreateLeavesNothingWhenAFolderFails(t *testing.T) {
	root := t.TempDir()
	if _, err := Create(failingMount{}, root, "run1", 0, Sizes{}); err == nil {
		t.Fatal("Create succeeded with a disk that cannot mount")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

type failingMount struct{ FolderDisk }

func (failingMount) Mount(string, Volume) error { return errors.New("no mount here") }

func TestWorkdirAndFilesLandBelowTheirFolders(t *testing.T) {
	d, err := Create(FolderDisk{}, t.TempDir(), "run1", uint32(os.Getuid()), Sizes{Disk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Remove() })
	for _, rel := range []string{"", "/", "/a/b", "c/../d"} {
		if err := d.MakeWorkdir(rel); err != nil {
			t.Fatalf("MakeWorkdir(%q): %v", rel, err)
		}
	}
	for _, dir := range []string{"a/b", "d"} {
		if st, err := os.Stat(filepath.Join(d.Path(Workspace), dir)); err != nil || !st.IsDir() {
			t.Errorf("workdir %s not made: %v", dir, err)
		}
	}
	if err := d.WriteFiles(Input, []File{{Path: "x/run.sh", Content: []byte("echo"), Executable: true}, {Path: "y.txt", Content: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"x/run.sh": 0o555, "y.txt": 0o444, "x": 0o555 | os.ModeDir, ".": 0o555 | os.ModeDir} {
		st, err := os.Stat(filepath.Join(d.Path(Input), p))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), mode)
		}
	}
}

// TestWriteFilesReplacesWhatAnEarlierCallWrote: a session's second call
// rewrites code/main.py, which the first left read-only in a read-only
// folder. Root's CAP_DAC_OVERRIDE would hide a write that needs it; the
// unprivileged run of the unit tests (make test-unprivileged) shows it.
func TestWriteFilesReplacesWhatAnEarlierCallWrote(t *testing.T) {
	d, err := Create(FolderDisk{}, t.TempDir(), "run1", uint32(os.Getuid()), Sizes{Disk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Remove() })
	for _, content := range []string{"print(1)", "print(2)"} {
		if err := d.WriteFiles(Code, []File{{Path: "main.py", Content: []byte(content)}, {Path: "lib/m.py", Content: []byte(content)}}); err != nil {
			t.Fatalf("WriteFiles(%q): %v", content, err)
		}
	}
	for p, mode := range map[string]os.FileMode{"main.py": 0o444, "lib/m.py": 0o444, "lib": 0o555 | os.ModeDir, ".": 0o555 | os.ModeDir} {
		st, err := os.Stat(filepath.Join(d.Path(Code), p))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), mode)
		}
	}
	for _, p := range []string{"main.py", "lib/m.py"} {
		if b, err := os.ReadFile(filepath.Join(d.Path(Code), p)); err != nil || string(b) != "print(2)" {
			t.Errorf("%s = %q, %v; want the second call's", p, b, err)
		}
	}
}

// TestMountRootIsATmpfsUntilUnmounted: the tasks' folder becomes a tmpfs
// of its own, once; a folder that holds something (a crash's task
// folders) is not hidden; UnmountRoot leaves the folder as it was.
func TestMountRootIsATmpfsUntilUnmounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (the root run of the unit tests has it)")
	}
	parent, err := os.MkdirTemp("/var/tmp", "sandboxd-tasks-")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(parent, "tasks")
	t.Cleanup(func() {
		unix.Unmount(root, unix.MNT_DETACH)
		os.RemoveAll(parent)
	})
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	fsType := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err != nil {
			t.Fatal(err)
		}
		return st.Type
	}
	if fsType() == unix.TMPFS_MAGIC {
		t.Skip("/var/tmp is a tmpfs here: nothing to mount")
	}
	disk := TmpfsDisk{}
	for range 2 { // the second finds it mounted
		if err := disk.MountRoot(root); err != nil {
			t.Fatal(err)
		}
	}
	if fsType() != unix.TMPFS_MAGIC {
		t.Fatalf("the tasks' folder is not a tmpfs")
	}
	if err := disk.UnmountRoot(root); err != nil {
		t.Fatal(err)
	}
	if fsType() == unix.TMPFS_MAGIC {
		t.Fatalf("the tasks' folder is still a tmpfs after UnmountRoot (mounted twice?)")
	}
	if err := disk.UnmountRoot(root); err != nil {
		t.Fatalf("UnmountRoot of a folder that is not mounted: %v", err)
	}

	left := filepath.Join(root, "left-by-a-crash")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := disk.MountRoot(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); err != nil || fsType() == unix.TMPFS_MAGIC {
		t.Fatalf("a tmpfs hid what the folder held: %v", err)
	}
}
