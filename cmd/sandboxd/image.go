package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/atomicwriter"
	"golang.org/x/sync/errgroup"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/images/builder"
	"github.com/sandboxd/sandboxd/runtime/containerd"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/runtime/docker"
)

func runImage(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return badUsage("give a subcommand: build or sbom")
	}
	switch args[0] {
	case "build":
		return runImageBuild(args[1:], stdout, stderr)
	case "sbom":
		return runImageSBOM(args[1:], stdout, stderr)
	}
	return badUsage("unknown subcommand %q: build or sbom", args[0])
}

// imageBuildFlags configure sandboxd image build.
type imageBuildFlags struct {
	imagesDir, lock, mirror, pipIndex string
	npmRegistry, out, cache           string
	dockerHost, containerd, ns        string
	// imageStore is the direct backend's image store.
	imageStore string
	force      bool
	jobs       int
	// lockMu keeps concurrent builds from writing the lock over each
	// other's entries.
	lockMu *sync.Mutex
}

// newImageBuildFlags are image build's defaults: the daemon's lock and
// containerd, the host's build cache.
func newImageBuildFlags() imageBuildFlags {
	def := DefaultConfig()
	return imageBuildFlags{lock: def.ImagesLock, containerd: def.ContainerdAddress, ns: def.ContainerdNamespace, imageStore: def.ImageStore,
		cache: "/var/cache/sandboxd/images", lockMu: &sync.Mutex{}}
}

// register adds the flags of where images come from and go, which image
// build and replay --rebuild share.
func (f *imageBuildFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.imagesDir, "images-dir", "", "folder of the operator's recipes, which NAME may name and recipes may start from")
	fs.StringVar(&f.lock, "lock", f.lock, "image lock file to record the built images in")
	fs.StringVar(&f.mirror, "mirror", "", "Debian mirror URI (default: the one apt uses)")
	fs.StringVar(&f.pipIndex, "pip-index", "", "Python package index (a PEP 503 simple index, the operator's mirror) that recipes' pip lines install from")
	fs.StringVar(&f.npmRegistry, "npm-registry", "", "npm registry (the operator's mirror) that recipes' npm lines install from")
	fs.StringVar(&f.dockerHost, "docker-host", "", "dockerd to load into (default: DOCKER_HOST or the default socket)")
	fs.StringVar(&f.containerd, "containerd-address", f.containerd, "containerd to import into, when it answers")
	fs.StringVar(&f.ns, "containerd-namespace", f.ns, "containerd namespace of the images")
	fs.StringVar(&f.imageStore, "image-store", f.imageStore, "the direct backend's image store to unpack into (\"\": none; root only)")
	fs.StringVar(&f.cache, "cache", f.cache, "folder of what earlier builds made, by recipe digest: an image the backends still have is not built again")
}

func runImageBuild(args []string, stdout, stderr io.Writer) error {
	f := newImageBuildFlags()
	fs := verbFlags("image build", stderr)
	f.register(fs)
	fs.StringVar(&f.out, "out", "", "write each image's archive to this folder (NAME.tar) and load it nowhere, lock nothing")
	fs.BoolVar(&f.force, "force", false, "build even when the image of this recipe is there already")
	fs.IntVar(&f.jobs, "jobs", goruntime.NumCPU(), "images built at once (each recipe is built whole, from Debian's packages, so any order works)")
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	catalog, err := images.WithDir(f.imagesDir)
	if err != nil {
		return err
	}
	names := fs.Args()
	if len(names) == 0 {
		names = catalog.Images
	}
	var recipes []images.Recipe
	for _, n := range names {
		r, err := pickRecipe(catalog, n)
		if err != nil {
			return err
		}
		recipes = append(recipes, r)
	}
	if f.jobs < 1 {
		return badUsage("--jobs %d: build at least one image at a time", f.jobs)
	}
	// Made now, not found missing after a build of minutes.
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The first failure stops the other builds, which leave nothing.
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(f.jobs)
	for _, r := range recipes {
		g.Go(func() error { return buildOne(ctx, f, r, stdout, stderr) })
	}
	return g.Wait()
}

// pickRecipe is the catalog's recipe called name (python or
// sandboxd/python), or the recipe in the folder name, which may start from
// one of the catalog's.
func pickRecipe(catalog images.Catalog, name string) (images.Recipe, error) {
	if r, ok := catalog.Recipe(images.Prefix + strings.TrimPrefix(name, images.Prefix)); ok {
		return r, nil
	}
	if _, err := os.Stat(filepath.Join(name, images.RecipeFile)); err != nil {
		return images.Recipe{}, fmt.Errorf("%s is neither an image of the catalog (%q) nor a folder with a recipe file", name, catalog.Images)
	}
	dir, err := filepath.Abs(name)
	if err != nil {
		return images.Recipe{}, err
	}
	r, err := images.ParseRecipe(os.DirFS(filepath.Dir(dir)), filepath.Base(dir), name)
	if err != nil {
		return images.Recipe{}, err
	}
	own := []images.Recipe{r}
	for _, c := range catalog.Recipes {
		if c.Name != r.Name {
			own = append(own, c)
		}
	}
	resolved, err := images.Resolve(own)
	if err != nil {
		return images.Recipe{}, err
	}
	return resolved[0], nil
}

// buildOne builds r, unless the lock and the backends have it already, and
// loads it into each backend that answers, then records it in the lock.
// Nothing is loaded or locked when the build fails.
func buildOne(ctx context.Context, f imageBuildFlags, r images.Recipe, stdout, stderr io.Writer) error {
	lock, err := images.LoadLock(f.lock)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	stores := loaders(ctx, f)
	if f.out == "" && len(stores) == 0 {
		return errNoBackend
	}
	if !f.force && f.out == "" {
		built, ok := lock.Entry(r.Name)
		if !ok || built.Recipe != r.Digest {
			built, ok = cached(f.cache, r)
		}
		if ok && copied(ctx, stores, r.Name, built.Digest, stderr) {
			fmt.Fprintf(stderr, "image build: %s is up to date (%s)\n", r.Name, built.Digest)
			if err := f.record(built); err != nil {
				return err
			}
			return remember(f.cache, built)
		}
	}
	start := time.Now()
	fmt.Fprintf(stderr, "image build: %s from %s (recipe %s)\n", r.Name, r.Source, r.Digest)
	img, err := build(ctx, f, r)
	if err != nil {
		return err
	}
	defer os.Remove(img.Archive)
	if f.out != "" {
		dst := filepath.Join(f.out, strings.TrimPrefix(r.Name, images.Prefix)+".tar")
		if err := moveFile(img.Archive, dst); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(stdout, "%s %s %s\n", r.Name, img.Digest, dst)
		return nil
	}
	if err := install(ctx, f, stores, r, img, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s (recipe %s, %d packages) in %s\n", r.Name, img.Digest, r.Digest, len(img.Packages), time.Since(start).Round(time.Second))
	return nil
}

// moveFile moves src to dst, copying it when they are on different file
// systems (the archive is built in the temporary folder); dst appears
// whole or not at all.
func moveFile(src, dst string) error {
	err := os.Rename(src, dst)
	if !errors.Is(err, syscall.EXDEV) {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// Not atomicwriter: it would put a half copy in place after a read
	// error.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	return os.Remove(src)
}

// build builds r. debootstrap's and dpkg's thousand lines go to a file,
// kept and named when the build fails.
func build(ctx context.Context, f imageBuildFlags, r images.Recipe) (builder.Image, error) {
	logFile, err := os.CreateTemp("", "sandboxd-image-build-*.log")
	if err != nil {
		return builder.Image{}, err
	}
	defer logFile.Close()
	img, err := builder.Build(ctx, r, builder.Options{Mirror: f.mirror, PipIndex: f.pipIndex, NpmRegistry: f.npmRegistry, Log: logFile})
	if err != nil {
		if ctx.Err() != nil {
			os.Remove(logFile.Name())
			return builder.Image{}, err
		}
		return builder.Image{}, fmt.Errorf("build %s: %w (the build's log: %s)", r.Name, err, logFile.Name())
	}
	os.Remove(logFile.Name())
	return img, nil
}

// install loads img, built from r, into each backend, then records it in
// the lock and the build cache.
func install(ctx context.Context, f imageBuildFlags, stores []loader, r images.Recipe, img builder.Image, stderr io.Writer) error {
	for _, e := range stores {
		if err := e.load(ctx, img.Archive); err != nil {
			return fmt.Errorf("load %s into %s: %w", r.Name, e.name, err)
		}
	}
	built := images.Locked{Name: r.Name, Digest: img.Digest, Recipe: r.Digest, Suite: r.Suite, Packages: img.Packages}
	if err := f.record(built); err != nil {
		return err
	}
	if err := remember(f.cache, built); err != nil {
		fmt.Fprintf(stderr, "image build: the next build will not know this one: %v\n", err)
	}
	return nil
}

// rebuildRecorded builds again the image a bundle recorded, from the
// recipe of the recorded digest in this host's catalog, and loads and
// locks it only when the build gives the recorded image digest: otherwise
// it names the packages the mirror no longer has as they were.
func rebuildRecorded(ctx context.Context, f imageBuildFlags, rec artifacts.Reproducible, stderr io.Writer) error {
	if rec.ImageRecipe == "" {
		return fmt.Errorf("the bundle records no recipe of its image %s: it cannot be rebuilt", rec.ImageDigest)
	}
	catalog, err := images.WithDir(f.imagesDir)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(catalog.Recipes, func(r images.Recipe) bool { return r.Digest == rec.ImageRecipe })
	if i < 0 {
		return fmt.Errorf("no recipe of this host's catalog (the built-in ones and --images-dir) has the recorded digest %s: give the folder of the recipe %s was built from with --images-dir", rec.ImageRecipe, rec.Image)
	}
	r := catalog.Recipes[i]
	stores := loaders(ctx, f)
	if len(stores) == 0 {
		return errNoBackend
	}
	start := time.Now()
	fmt.Fprintf(stderr, "replay: rebuilding %s %s from %s (recipe %s)\n", r.Name, rec.ImageDigest, r.Source, r.Digest)
	img, err := build(ctx, f, r)
	if err != nil {
		return err
	}
	defer os.Remove(img.Archive)
	if img.Digest != rec.ImageDigest {
		why := "the bundle records no package list to say which packages changed"
		if len(rec.ImagePackages) > 0 {
			why = "the mirror's packages are not those it was built from: " + strings.Join(images.DiffPackages(rec.ImagePackages, img.Packages), "; ")
		}
		return fmt.Errorf("the rebuild of %s gave %s, not the recorded %s: %s", r.Name, img.Digest, rec.ImageDigest, why)
	}
	if err := install(ctx, f, stores, r, img, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "replay: rebuilt %s bit for bit in %s\n", rec.ImageDigest, time.Since(start).Round(time.Second))
	return nil
}

// record puts built in the lock file, read again under the mutex: the
// builds running beside this one write it too.
func (f imageBuildFlags) record(built images.Locked) error {
	f.lockMu.Lock()
	defer f.lockMu.Unlock()
	lock, err := images.LoadLock(f.lock)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	lock.Put(built)
	return lock.Write(f.lock)
}

// cached is what an earlier build of recipe r made, if the cache has it.
func cached(dir string, r images.Recipe) (images.Locked, bool) {
	b, err := os.ReadFile(filepath.Join(dir, strings.TrimPrefix(r.Digest, "sha256:")+".json"))
	if err != nil {
		return images.Locked{}, false
	}
	var built images.Locked
	if json.Unmarshal(b, &built) != nil || built.Recipe != r.Digest || built.Name != r.Name {
		return images.Locked{}, false
	}
	return built, true
}

// remember keeps what a build made, by its recipe's digest.
func remember(dir string, built images.Locked) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return err
	}
	return atomicwriter.WriteFile(filepath.Join(dir, strings.TrimPrefix(built.Recipe, "sha256:")+".json"), b, 0o644)
}

// loader is a backend's image store, which an image is loaded into, and
// which saves what it has when it can.
type loader struct {
	name string
	load func(ctx context.Context, archive string) error
	has  func(ctx context.Context, id string) bool
	save func(ctx context.Context, name, id string) (io.ReadCloser, error)
}

// errNoBackend refuses to build an image nothing could load.
var errNoBackend = errors.New("no backend to load the image into: neither Docker nor containerd answers, and the direct backend's image store is off (--image-store) or not root's to write")

// loaders are the backends that answer.
func loaders(ctx context.Context, f imageBuildFlags) []loader {
	open := func(load func(context.Context, io.Reader) error) func(context.Context, string) error {
		return func(ctx context.Context, path string) error {
			a, err := os.Open(path)
			if err != nil {
				return err
			}
			defer a.Close()
			return load(ctx, a)
		}
	}
	var ls []loader
	if docker.Answers(ctx, f.dockerHost) {
		ls = append(ls, loader{name: "Docker",
			load: open(func(ctx context.Context, r io.Reader) error { return docker.LoadImage(ctx, f.dockerHost, r) }),
			has:  func(ctx context.Context, id string) bool { return docker.HasImage(ctx, f.dockerHost, id) },
			save: func(ctx context.Context, name, id string) (io.ReadCloser, error) {
				return docker.SaveImage(ctx, f.dockerHost, name, id)
			}})
	}
	if f.imageStore != "" && os.Geteuid() == 0 {
		ls = append(ls, loader{name: "the image store",
			load: func(_ context.Context, path string) error { _, err := direct.LoadImage(f.imageStore, path); return err },
			has:  func(_ context.Context, id string) bool { return direct.HasImage(f.imageStore, id) }})
	}
	if containerd.Answers(ctx, f.containerd) {
		ls = append(ls, loader{name: "containerd",
			load: open(func(ctx context.Context, r io.Reader) error { return containerd.LoadImage(ctx, f.containerd, f.ns, r) }),
			has:  func(ctx context.Context, id string) bool { return containerd.HasImage(ctx, f.containerd, f.ns, id) }})
	}
	return ls
}

// copied says whether every backend has the image id, called name,
// once those that lack it have been given it by one that has it and can
// save it: a backend added to a host gets the images the others have
// without a build.
func copied(ctx context.Context, ls []loader, name, id string, stderr io.Writer) bool {
	var from *loader
	var lacking []loader
	for i, l := range ls {
		switch {
		case !l.has(ctx, id):
			lacking = append(lacking, l)
		case l.save != nil && from == nil:
			from = &ls[i]
		}
	}
	if len(lacking) == 0 {
		return true
	}
	if from == nil {
		return false
	}
	for _, to := range lacking {
		if err := copyImage(ctx, *from, to, name, id); err != nil {
			fmt.Fprintf(stderr, "image build: %s: %s did not give it to %s: %v\n", name, from.name, to.name, err)
			return false
		}
		fmt.Fprintf(stderr, "image build: %s copied from %s into %s\n", name, from.name, to.name)
	}
	return true
}

// copyImage saves the image from one backend into a file and loads that
// into another, which must then have it.
func copyImage(ctx context.Context, from, to loader, name, id string) error {
	archive, err := os.CreateTemp("", "sandboxd-image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(archive.Name())
	rc, err := from.save(ctx, name, id)
	if err != nil {
		archive.Close()
		return err
	}
	_, err = io.Copy(archive, rc)
	err = errors.Join(err, rc.Close(), archive.Close())
	if err != nil {
		return err
	}
	if err := to.load(ctx, archive.Name()); err != nil {
		return err
	}
	if !to.has(ctx, id) {
		return fmt.Errorf("it has not %s after the load", id)
	}
	return nil
}

func runImageSBOM(args []string, stdout, stderr io.Writer) error {
	fs := verbFlags("image sbom", stderr)
	lockPath := fs.String("lock", DefaultConfig().ImagesLock, "image lock file")
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sandboxd image sbom [--lock FILE] NAME")
	}
	lock, err := images.LoadLock(*lockPath)
	if err != nil {
		return err
	}
	name := images.Prefix + strings.TrimPrefix(fs.Arg(0), images.Prefix)
	locked, ok := lock.Entry(name)
	if !ok {
		return fmt.Errorf("the lock %s has no image %s", *lockPath, name)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // package URLs hold & between qualifiers
	return enc.Encode(images.SPDX(locked))
}
