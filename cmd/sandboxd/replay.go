package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/client"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/judge"
)

// runReplay is `sandboxd replay BUNDLE`.
func runReplay(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := verbFlags("replay", stderr)
	c.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	drift := fs.Bool("allow-image-drift", false, "when the recorded image is gone, run on the current image of its name and warn")
	var mounts, runtimes stringsFlag
	fs.Var(&mounts, "allow-mount", "an operator mount the bundle may ask for (repeatable): none is granted unless named")
	fs.Var(&runtimes, "allow-runtime", "a runtime the bundle may ask for besides the daemon's default (repeatable)")
	liveTools := fs.Bool("live-tools", false, "call the read-only tools the program calls again, on the daemon's tool servers, instead of answering every call from the record")
	rebuild := fs.Bool("rebuild", false, "when the recorded image is gone, build it again from its recipe (root, on the daemon's host) and replay on it if the build gives the recorded digest")
	build := newImageBuildFlags()
	build.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd replay [--json] [--allow-image-drift | --rebuild] [--allow-mount NAME] [--allow-runtime NAME] [--live-tools] BUNDLE")
		return exitError{2}
	}
	if *rebuild && *drift {
		return badUsage("--rebuild and --allow-image-drift: choose one; the one rebuilds the recorded image, the other runs on another")
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx := context.Background()
	rec, err := loadBundle(ctx, client, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd replay: %s: REFUSED: %v\n", pos[0], err)
		return exitError{1}
	}
	inv, err := client.Inventory(ctx)
	if err != nil {
		return err
	}
	opts := reproducer.Options{AllowImageDrift: *drift, AllowMounts: mounts, AllowRuntimes: runtimes, DefaultRuntime: inv.DefaultRuntime, LiveReadTools: *liveTools}
	if rec.Manifest().Run.Session != nil {
		return replayChain(ctx, rec, client, opts, *asJSON, stdout)
	}
	replay := func() (*reproducer.Report, error) {
		if rec.IsJudgement() {
			return reproducer.ReplayJudgement(ctx, rec, judgeOn(client), opts)
		}
		return reproducer.Replay(ctx, rec, client, opts)
	}
	rep, err := replay()
	var missing *task.ImageMissingError
	if errors.As(err, &missing) && *rebuild {
		if err := rebuildRecorded(ctx, build, rec.Manifest().Reproducible, stderr); err != nil {
			return err
		}
		rep, err = replay()
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(stdout, rep)
	}
	if !rep.Reproduced {
		return exitError{1}
	}
	return nil
}

// printReport prints a replay's report; what came from the bundles (names,
// contents, diffs) through printable.
func printReport(w io.Writer, rep *reproducer.Report) {
	v := func(s string) string { return printable(s, false) }
	what := "run"
	if rep.Kind != "" {
		what = rep.Kind
	}
	fmt.Fprintf(w, "replayed %s %s (bundle %s)\n      as %s %s (bundle %s)\n\n", what, v(rep.RecordedRun), rep.RecordedBundle, what, v(rep.ReplayedRun), rep.ReplayedBundle)
	differ := 0
	for _, c := range rep.Checks {
		mark := "match  "
		if !c.Match {
			mark = "DIFFERS"
			differ++
		}
		line := fmt.Sprintf("  %s  %s", mark, v(c.Name))
		if !c.Match && (c.Recorded != "" || c.Replayed != "") {
			line += fmt.Sprintf(": recorded %s, replayed %s", v(c.Recorded), v(c.Replayed))
		}
		fmt.Fprintln(w, line)
		if c.Diff != "" {
			for _, l := range strings.Split(c.Diff, "\n") {
				fmt.Fprintf(w, "           %s\n", v(l))
			}
		}
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", v(warning))
	}
	if rep.Reproduced {
		fmt.Fprintf(w, "\nreproduced: all %d checks match\n", len(rep.Checks))
	} else {
		fmt.Fprintf(w, "\nNOT reproduced: %d of %d checks differ\n", differ, len(rep.Checks))
	}
}

// replayChain replays the chain of session calls that ends at last in a
// new session, and names the first call that differs.
func replayChain(ctx context.Context, last *reproducer.Recorded, client *client.Client, opts reproducer.Options, asJSON bool, stdout io.Writer) error {
	chain, err := reproducer.LoadChain(ctx, last, client)
	if err != nil {
		return err
	}
	rep, err := reproducer.ReplayChain(ctx, chain, client, opts, false)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "replayed the %d calls of session %s in session %s\n", len(chain), printable(last.Manifest().Run.Session.ID, false), rep.Session)
		for i, c := range rep.Calls {
			if c.Reproduced {
				fmt.Fprintf(stdout, "  call %d: reproduced (%d checks)\n", i+1, len(c.Checks))
				continue
			}
			fmt.Fprintf(stdout, "  call %d: DIFFERS\n", i+1)
			printReport(stdout, c)
		}
		for _, w := range rep.Warnings {
			fmt.Fprintf(stdout, "  warning: %s\n", printable(w, false))
		}
		if rep.Reproduced {
			fmt.Fprintf(stdout, "reproduced: every call matches\n")
		} else {
			fmt.Fprintf(stdout, "NOT reproduced: call %d is the first that differs\n", rep.FirstDiffering)
		}
	}
	if !rep.Reproduced {
		return exitError{1}
	}
	return nil
}

// judgeOn judges one submission on the daemon c reaches.
func judgeOn(c *client.Client) reproducer.Judge {
	return func(ctx context.Context, sub judge.Submission) (judge.Judgement, error) {
		out, err := c.Evaluate(ctx, []judge.Submission{sub}, client.EvaluateEvents{})
		if err != nil {
			return judge.Judgement{}, err
		}
		return out[0].Judgement, out[0].Err
	}
}

// loadBundle loads the bundle file name, or, when no file has that name
// and it is a digest, the bundle of that digest from the daemon's store.
func loadBundle(ctx context.Context, c *client.Client, name string) (*reproducer.Recorded, error) {
	if _, err := os.Stat(name); err == nil || !strings.HasPrefix(name, "sha256:") {
		return reproducer.LoadFile(name, artifacts.DefaultReadLimits())
	}
	if _, err := artifacts.ParseDigest(name); err != nil {
		return nil, err
	}
	r, err := c.OpenBundle(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return reproducer.Load(r, name, artifacts.DefaultReadLimits())
}
