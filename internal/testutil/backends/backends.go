// Package backends connects tests to the backends' daemons the set-up
// starts (dockerd and a standalone containerd) and lists what a test left
// in them.
package backends

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/containerd"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/runtime/docker"
)

const (
	containerdSocket    = "/run/containerd/containerd.sock"
	containerdNamespace = "sandboxd"
	// snapshotter is the containerd backend's.
	snapshotter = "overlayfs"
	// instanceLabel is task.LabelInstance: the containers of a daemon
	// instance, whose shims and snapshots are named after it.
	instanceLabel = "io.sandboxd.instance"
)

// Backend is a backend on its real daemon.
type Backend struct {
	Runtime interface {
		runtime.Runtime
		runtime.Preparer
	}
	// Leftovers lists the backend's containers that carry all of labels,
	// running or not, and for an instance label also its shims and
	// snapshots.
	Leftovers func(ctx context.Context, labels map[string]string) ([]string, error)
	// Annotations reads a container's OCI spec annotations, as the
	// backend stored them (containerd only).
	Annotations func(ctx context.Context, id string) (map[string]string, error)
	// Tag points the image name at the image of ref, creating or moving
	// it; the test's cleanup removes the name.
	Tag func(ctx context.Context, t testing.TB, name, ref string) error
}

// FollowsAMovedName moves a name between two images of e three times
// and checks that Image gives the image moved to (its ID, labels and
// environment), and keeps giving it. The backend may give the image moved
// from until its daemon has told of the move, for up to 5 s.
func FollowsAMovedName(t *testing.T, e Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shell, err := e.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		t.Fatal(err)
	}
	python, err := e.Runtime.Image(ctx, "sandboxd/python")
	if err != nil {
		t.Fatal(err)
	}
	if shell.ID == python.ID {
		t.Fatalf("sandboxd/shell and sandboxd/python are one image, %s: the test needs two", shell.ID)
	}
	name := "sandboxd.test/moved:" + strconv.Itoa(os.Getpid())
	for i, want := range []runtime.Image{shell, python, shell} {
		if err := e.Tag(ctx, t, name, want.Ref); err != nil {
			t.Fatal(err)
		}
		moved := time.Now()
		stale := 0
		for {
			got, err := e.Runtime.Image(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID == want.ID {
				break
			}
			stale++
			if time.Since(moved) > 5*time.Second {
				t.Fatalf("move %d: %s is still %s %v after it was moved to %s's %s", i, name, got.ID, time.Since(moved), want.Ref, want.ID)
			}
		}
		t.Logf("move %d seen after %v, %d answers before it the old image's", i, time.Since(moved), stale)
		for range 2 { // the kept one
			got, err := e.Runtime.Image(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != want.ID || got.Ref != name || fmt.Sprint(got.Env) != fmt.Sprint(want.Env) || fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels) {
				t.Fatalf("move %d: %s is %s %v %v, want %s's %s %v %v", i, name, got.ID, got.Env, got.Labels, want.Ref, want.ID, want.Env, want.Labels)
			}
		}
	}
}

// Options are what a test asks of a backend beyond the defaults.
type Options struct {
	// Egress links allow-listed containers to this gateway; Instance
	// names the docker backend's egress network.
	Egress   runtime.EgressGateway
	Instance string
}

func optionsOf(opts []Options) Options {
	if len(opts) == 0 {
		return Options{}
	}
	return opts[0]
}

// cgroupParent is the parent cgroup of a test process's containers on one
// backend. A backend owns its parent cgroup: reaping an instance kills what
// runs in the cgroups below it, so test processes must not share one. The
// parents of test processes that are gone (killed with -9) are removed.
func cgroupParent(backend string) string {
	prefix := "conformance-" + backend + "-"
	if h, err := cgroup.Open("/sys/fs/cgroup"); err == nil {
		children, _ := h.Children(cgroup.Daemons)
		for _, name := range children {
			pid, ok := strings.CutPrefix(name, prefix)
			if _, err := os.Stat("/proc/" + pid); ok && err != nil {
				h.Remove(cgroup.InstanceParent(name))
			}
		}
	}
	return cgroup.InstanceParent(prefix + strconv.Itoa(os.Getpid()))
}

// netnsRoot holds the folders where test processes pin their containers'
// network namespaces, one per process.
const netnsRoot = "/run/sandboxd-test/netns"

// netnsDir is the folder of this test process's network namespaces. The
// namespaces that test processes now gone (killed with -9) left pinned are
// unmounted and their folders removed.
func netnsDir(t testing.TB) string {
	t.Helper()
	entries, _ := os.ReadDir(netnsRoot)
	for _, e := range entries {
		if _, err := os.Stat("/proc/" + e.Name()); err == nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		dir := filepath.Join(netnsRoot, e.Name())
		pins, _ := os.ReadDir(dir)
		for _, p := range pins {
			unix.Unmount(filepath.Join(dir, p.Name()), unix.MNT_DETACH)
		}
		os.RemoveAll(dir)
	}
	dir := filepath.Join(netnsRoot, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Empty once every container of the test is gone; another backend of
	// the same process may still use it otherwise.
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// Docker reaches the local dockerd, or skips (fails in CI).
func Docker(t testing.TB, opts ...Options) Backend {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := optionsOf(opts)
	rt, err := docker.Connect(ctx, docker.Options{InitPath: testutil.BuildInit(t), CgroupRoot: "/sys/fs/cgroup", CgroupParent: cgroupParent("docker"),
		Egress: o.Egress, Instance: o.Instance})
	if err != nil {
		testutil.SkipOrFail(t, "no dockerd: %v (scripts/setup.sh starts one)", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	c, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	leftovers := func(ctx context.Context, labels map[string]string) ([]string, error) {
		args := filters.NewArgs()
		for k, v := range labels {
			args.Add("label", k+"="+v)
		}
		list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, c := range list {
			names = append(names, c.Names...)
		}
		return names, nil
	}
	tag := func(ctx context.Context, t testing.TB, name, ref string) error {
		if err := c.ImageTag(ctx, ref, name); err != nil {
			return err
		}
		t.Cleanup(func() {
			if _, err := c.ImageRemove(context.Background(), name, image.RemoveOptions{}); err != nil && !errdefs.IsNotFound(err) {
				t.Errorf("untag %s: %v", name, err)
			}
		})
		return nil
	}
	return Backend{Runtime: rt, Leftovers: leftovers, Tag: tag}
}

// Containerd reaches the set-up's standalone containerd, or skips (fails
// in CI).
func Containerd(t testing.TB, opts ...Options) Backend {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := containerd.Connect(ctx, containerd.Options{
		Address: containerdSocket, Namespace: containerdNamespace, InitPath: testutil.BuildInit(t), NetnsDir: netnsDir(t),
		RunscPath: runscPath, RunscRoot: "/run/containerd/runsc",
		CgroupRoot: "/sys/fs/cgroup", CgroupParent: cgroupParent("containerd"), Egress: optionsOf(opts).Egress,
	})
	if err != nil {
		testutil.SkipOrFail(t, "no containerd: %v (scripts/setup.sh starts one)", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	c, err := ctrd.New(containerdSocket, ctrd.WithDefaultNamespace(containerdNamespace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return Backend{Runtime: rt, Leftovers: func(ctx context.Context, labels map[string]string) ([]string, error) {
		return containerdLeftovers(namespaces.WithNamespace(ctx, containerdNamespace), c, labels)
	}, Annotations: func(ctx context.Context, id string) (map[string]string, error) {
		ctx = namespaces.WithNamespace(ctx, containerdNamespace)
		ctr, err := c.LoadContainer(ctx, id)
		if err != nil {
			return nil, err
		}
		spec, err := ctr.Spec(ctx)
		if err != nil {
			return nil, err
		}
		return spec.Annotations, nil
	}, Tag: func(ctx context.Context, t testing.TB, name, ref string) error {
		ctx = namespaces.WithNamespace(ctx, containerdNamespace)
		named, err := reference.ParseDockerRef(name)
		if err != nil {
			return err
		}
		from, err := reference.ParseDockerRef(ref)
		if err != nil {
			return err
		}
		name = named.String()
		src, err := c.ImageService().Get(ctx, from.String())
		if err != nil {
			return err
		}
		is := c.ImageService()
		if _, err := is.Update(ctx, images.Image{Name: name, Target: src.Target}, "target"); errdefs.IsNotFound(err) {
			_, err = is.Create(ctx, images.Image{Name: name, Target: src.Target})
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		t.Cleanup(func() {
			ctx := namespaces.WithNamespace(context.Background(), containerdNamespace)
			if err := is.Delete(ctx, name); err != nil && !errdefs.IsNotFound(err) {
				t.Errorf("remove the image name %s: %v", name, err)
			}
		})
		return nil
	}}
}

// directRoot holds the state folders of test processes' direct backends,
// one per process.
const directRoot = "/run/sandboxd-test/direct"

// directStateDir is a state folder of this test process's for one
// direct backend, PID-N: a daemon's backend has its folder to itself.
// What test processes now gone (killed with -9) left in theirs is reaped
// (containers killed, root file systems unmounted, network namespaces
// removed) and their folders removed.
func directStateDir(t testing.TB, images string) string {
	t.Helper()
	entries, _ := os.ReadDir(directRoot)
	for _, e := range entries {
		pid, _, _ := strings.Cut(e.Name(), "-")
		if _, err := os.Stat("/proc/" + pid); err == nil || pid == strconv.Itoa(os.Getpid()) {
			continue
		}
		dir := filepath.Join(directRoot, e.Name())
		rt, err := direct.New(direct.Options{StateDir: dir, ImageDir: images, InitPath: testutil.BuildInit(t), RunscPath: runscPath,
			CgroupRoot: "/sys/fs/cgroup", CgroupParent: cgroup.InstanceParent("conformance-direct-" + pid)})
		if err == nil {
			if _, err := rt.Reap(context.Background(), nil); err != nil {
				t.Logf("reap what test process %s left: %v", pid, err)
			}
			rt.Close()
		}
		os.RemoveAll(dir)
	}
	return filepath.Join(directRoot, fmt.Sprintf("%d-%d", os.Getpid(), directStates.Add(1)))
}

// directStates numbers this process's direct backends.
var directStates atomic.Int64

// runscPath is where the set-up installs gVisor's runsc.
const runscPath = "/usr/local/lib/sandboxd/runsc"

// Direct runs the OCI runtimes itself, on the host's image store, or
// skips (fails in CI) where it cannot.
func Direct(t testing.TB, opts ...Options) Backend {
	t.Helper()
	testutil.RequireRoot(t)
	stateDir := directStateDir(t, direct.DefaultImageDir)
	rt, err := direct.New(direct.Options{
		StateDir: stateDir, InitPath: testutil.BuildInit(t), RunscPath: runscPath,
		CgroupRoot: "/sys/fs/cgroup", CgroupParent: cgroupParent("direct"), Egress: optionsOf(opts).Egress,
	})
	if err != nil {
		testutil.SkipOrFail(t, "no direct backend: %v", err)
	}
	if _, err := rt.Image(context.Background(), "sandboxd/shell"); err != nil {
		testutil.SkipOrFail(t, "the direct backend's image store has no sandboxd/shell: %v (scripts/setup.sh builds the images into it)", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	store, err := direct.OpenStore(direct.DefaultImageDir)
	if err != nil {
		t.Fatal(err)
	}
	leftovers := func(ctx context.Context, labels map[string]string) ([]string, error) {
		return directLeftovers(stateDir, labels)
	}
	tag := func(ctx context.Context, t testing.TB, name, ref string) error {
		img, err := store.Image(ref)
		if err != nil {
			return err
		}
		if err := store.Name(img.ID, name); err != nil {
			return err
		}
		t.Cleanup(func() {
			// Only the name: the image has others.
			if err := store.Unname(name); err != nil {
				t.Errorf("untag %s: %v", name, err)
			}
		})
		return nil
	}
	return Backend{Runtime: rt, Leftovers: leftovers, Tag: tag}
}

// directLeftovers lists the containers of the state folder stateDir whose
// records carry labels and, for an instance, its containers the OCI
// runtimes still know and the runtimes' processes that still run them.
func directLeftovers(stateDir string, labels map[string]string) ([]string, error) {
	var left []string
	containers := filepath.Join(stateDir, "containers")
	entries, err := os.ReadDir(containers)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		var rec struct{ Labels map[string]string }
		b, err := os.ReadFile(filepath.Join(containers, e.Name(), "sandboxd.json"))
		if err != nil || json.Unmarshal(b, &rec) != nil {
			left = append(left, "container folder "+e.Name()+" without its record")
			continue
		}
		matches := true
		for k, v := range labels {
			matches = matches && rec.Labels[k] == v
		}
		if matches {
			left = append(left, e.Name())
		}
	}
	instance, ok := labels[instanceLabel]
	if !ok {
		return left, nil
	}
	prefix := "sandboxd-" + instance + "-"
	roots, _ := filepath.Glob(filepath.Join(stateDir, "oci", "*", prefix+"*"))
	for _, r := range roots {
		left = append(left, "OCI runtime state "+r)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && slices.Contains(args, "--bundle") && strings.HasPrefix(args[len(args)-2], prefix) {
			left = append(left, fmt.Sprintf("%s run %s (%s)", args[0], args[len(args)-2], p.Name()))
		}
	}
	return left, nil
}

// containerdLeftovers lists the containers that carry labels and, for an
// instance, its shims and snapshots: containerd can forget a shim whose
// container it deleted, and a create cut short can leave its snapshot.
func containerdLeftovers(ctx context.Context, c *ctrd.Client, labels map[string]string) ([]string, error) {
	var filters []string
	for k, v := range labels {
		filters = append(filters, fmt.Sprintf("labels.%q==%q", k, v))
	}
	list, err := c.Containers(ctx, strings.Join(filters, ","))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, ctr := range list {
		ids = append(ids, ctr.ID())
	}
	instance, ok := labels[instanceLabel]
	if !ok {
		return ids, nil
	}
	prefix := "sandboxd-" + instance + "-"
	shims, err := shimsOf(prefix)
	if err != nil {
		return nil, err
	}
	ids = append(ids, shims...)
	err = c.SnapshotService(snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if strings.HasPrefix(info.Name, prefix) {
			ids = append(ids, "snapshot "+info.Name)
		}
		return nil
	})
	return ids, err
}

// shimsOf lists the running shims whose container ID starts with prefix,
// as "shim PID for ID".
func shimsOf(prefix string) ([]string, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var shims []string
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue // not a process, or gone
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args[:len(args)-1] {
			if a == "-id" && strings.HasPrefix(args[i+1], prefix) {
				shims = append(shims, fmt.Sprintf("shim %s for %s", p.Name(), args[i+1]))
			}
		}
	}
	return shims, nil
}

// ImportImage makes an image called ref (a name without a tag) from an
// empty file system with the Dockerfile instructions changes, in Docker and
// in containerd's namespace, and returns its ID. Both are removed when the
// test ends.
func ImportImage(t testing.TB, ref string, changes ...string) string {
	t.Helper()
	return importLayer(t, ref, layerTar(""), false, "{{.Id}}", changes...)
}

// ImportPacked makes an image called ref (a name without a tag) of one
// layer no other image has, and leaves it packed in containerd's
// namespace: its layer's snapshot, named by the chain ID it returns, is
// made only when something unpacks it. The image is removed when the test
// ends.
func ImportPacked(t testing.TB, ref string) string {
	t.Helper()
	unique := fmt.Sprintf("%s %d %d\n", ref, os.Getpid(), time.Now().UnixNano())
	// The chain ID of a single layer is its diff ID.
	return importLayer(t, ref, layerTar(unique), true, "{{index .RootFS.Layers 0}}")
}

// layerTar is a layer of one empty folder, tmp, and, when unique is not
// empty, a file called unique holding it.
func layerTar(unique string) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777})
	if unique != "" {
		tw.WriteHeader(&tar.Header{Name: "unique", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(unique))})
		tw.Write([]byte(unique))
	}
	tw.Close()
	return &b
}

// importLayer makes an image called ref of the file system layer (a tar)
// with the Dockerfile instructions changes, in Docker and in containerd's
// namespace (left packed there when packed), both removed when the test
// ends, and returns what format, of docker image inspect, says of it.
func importLayer(t testing.TB, ref string, layer io.Reader, packed bool, format string, changes ...string) string {
	t.Helper()
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	args = append(args, "-", ref)
	imp := exec.Command("docker", args...)
	imp.Stdin = layer
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", ref, err, out)
	}
	t.Cleanup(func() {
		exec.Command("docker", "rmi", "-f", ref).Run()
		exec.Command("ctr", "--address", containerdSocket, "-n", containerdNamespace, "images", "rm", "docker.io/"+ref+":latest").Run()
	})
	said, err := exec.Command("docker", "image", "inspect", "-f", format, ref).Output()
	if err != nil {
		t.Fatal(err)
	}
	into := "ctr --address " + containerdSocket + " -n " + containerdNamespace + " images import"
	if packed {
		into += " --no-unpack"
	}
	save := exec.Command("sh", "-c", "docker save "+ref+" | "+into+" -")
	if out, err := save.CombinedOutput(); err != nil {
		t.Fatalf("import %s into containerd: %v\n%s", ref, err, out)
	}
	loadIntoStore(t, ref)
	return strings.TrimSpace(string(said))
}

// loadIntoStore puts Docker's image ref in the direct backend's image
// store, whose name (and image, when no other name has it) goes when the
// test ends.
func loadIntoStore(t testing.TB, ref string) {
	t.Helper()
	store, err := direct.OpenStore(direct.DefaultImageDir)
	if err != nil {
		t.Fatal(err)
	}
	save := exec.Command("docker", "save", ref)
	out, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	_, loadErr := store.Load(out)
	io.Copy(io.Discard, out)
	if err := errors.Join(loadErr, save.Wait()); err != nil {
		t.Fatalf("load %s into the image store: %v", ref, err)
	}
	t.Cleanup(func() {
		if err := store.Unname(ref); err != nil {
			t.Errorf("remove %s from the image store: %v", ref, err)
		}
	})
}

// HasSnapshot says whether containerd's snapshotter of sandboxd's
// containers holds the snapshot called key.
func HasSnapshot(t testing.TB, key string) bool {
	t.Helper()
	c, err := ctrd.New(containerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), containerdNamespace)
	_, err = c.SnapshotService(snapshotter).Stat(ctx, key)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// Volumes counts Docker's volumes.
func Volumes(t testing.TB) int {
	t.Helper()
	out, err := exec.Command("docker", "volume", "ls", "-q").Output()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(out)))
}

// RuncIsCurrent checks that the runc a backend runs, as its Info reports
// it, is the runc on PATH and carries runc's November 2025 fixes
// (CVE-2025-31133, CVE-2025-52565, CVE-2025-52881: 1.2.8, 1.3.3 and
// later): the set-up's pinned runc, ahead of Debian's 1.1.5 on PATH.
func RuncIsCurrent(t *testing.T, b Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := b.Runtime.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path, err := exec.LookPath(runtime.RuncName)
	if err != nil {
		testutil.SkipOrFail(t, "no runc on PATH: %v", err)
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	onPath := strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "runc version ")
	var reported string
	for _, r := range info.Runtimes {
		if r.Name == runtime.RuncName {
			reported = r.Version
		}
	}
	if reported != onPath {
		t.Errorf("%s reports runc %q; the runc on PATH (%s) is %q", info.Backend, reported, path, onPath)
	}
	var major, minor, patch int
	if _, err := fmt.Sscanf(onPath, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatalf("runc's version %q: %v", onPath, err)
	}
	fixed := major > 1 || minor > 3 || minor == 3 && patch >= 3 || minor == 2 && patch >= 8
	if !fixed && os.Getenv(testutil.RequireBackendsEnv) != "" {
		t.Errorf("runc %s at %s has none of the November 2025 fixes (1.2.8, 1.3.3): scripts/install-runc.sh installs the pinned one", onPath, path)
	}
}
