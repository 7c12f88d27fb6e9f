package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/reproducer"
)

// runReplay is `sandboxd replay BUNDLE`.
func runReplay(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	drift := fs.Bool("allow-image-drift", false, "when the recorded image is gone, run on the current image of its name and warn")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sandboxd replay [--json] [--allow-image-drift] BUNDLE")
		return exitError{2}
	}
	rec, err := reproducer.LoadFile(pos[0], artifacts.DefaultReadLimits())
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd replay: %s: REFUSED: %v\n", pos[0], err)
		return exitError{1}
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	rep, err := reproducer.Replay(context.Background(), rec, client, reproducer.Options{AllowImageDrift: *drift})
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

func printReport(w io.Writer, rep *reproducer.Report) {
	fmt.Fprintf(w, "replayed run %s (bundle %s)\n      as run %s (bundle %s)\n\n", rep.RecordedRun, rep.RecordedBundle, rep.ReplayedRun, rep.ReplayedBundle)
	differ := 0
	for _, c := range rep.Checks {
		mark := "match  "
		if !c.Match {
			mark = "DIFFERS"
			differ++
		}
		line := fmt.Sprintf("  %s  %s", mark, c.Name)
		if !c.Match && (c.Recorded != "" || c.Replayed != "") {
			line += fmt.Sprintf(": recorded %s, replayed %s", c.Recorded, c.Replayed)
		}
		fmt.Fprintln(w, line)
		if c.Diff != "" {
			for _, l := range strings.Split(c.Diff, "\n") {
				fmt.Fprintf(w, "           %s\n", l)
			}
		}
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warning)
	}
	if rep.Reproduced {
		fmt.Fprintf(w, "\nreproduced: all %d checks match\n", len(rep.Checks))
	} else {
		fmt.Fprintf(w, "\nNOT reproduced: %d of %d checks differ\n", differ, len(rep.Checks))
	}
}
