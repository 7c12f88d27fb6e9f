package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/task"
)

func runImages(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := verbFlags("images", stderr)
	c.register(fs)
	publicKey := fs.Bool("public-key", false, "print the daemon's current public signing key (PEM), which sandboxd verify --key takes")
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	inv, err := c.inventory()
	if err != nil {
		return err
	}
	if *publicKey {
		if len(inv.SigningKeys) == 0 {
			return errors.New("the daemon signs no bundles")
		}
		_, err := io.WriteString(stdout, inv.SigningKeys[0])
		return err
	}
	printInventory(stdout, inv)
	return nil
}

func printInventory(w io.Writer, inv task.Inventory) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LANGUAGE\tIMAGE\tCOMMAND\n")
	for _, l := range inv.Languages {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Name, l.Image, strings.Join(l.Command, " "))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "IMAGE\tDIGEST\tRECIPE\tLOCK\n")
	for _, im := range inv.Images {
		digest, lock := im.Digest, "matches"
		switch {
		case im.Digest == "":
			digest, lock = "(not built)", "-"
		case im.LockedDigest == "":
			lock = "not locked"
		case im.LockedDigest != im.Digest:
			lock = "DIFFERS: " + im.LockedDigest
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", im.Name, digest, recipeState(im), lock)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "RUNTIME\tVERSION\tDEFAULT\tALLOWED\n")
	for _, r := range inv.Runtimes {
		def, allowed := "", "no"
		if r.Name == inv.DefaultRuntime {
			def = "yes"
		}
		if r.Allowed {
			allowed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Version, def, allowed)
	}
	fmt.Fprintln(tw)
	d, m := inv.DefaultLimits, inv.MaxLimits
	fmt.Fprintf(tw, "LIMIT\tDEFAULT\tMAXIMUM\n")
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	fmt.Fprintf(tw, "memory\t%s\t%s\n", size(d.MemoryBytes), size(m.MemoryBytes))
	fmt.Fprintf(tw, "cpu\t%d millicores\t%d millicores\n", d.CPUMillis, m.CPUMillis)
	fmt.Fprintf(tw, "pids\t%d\t%d\n", d.Pids, m.Pids)
	fmt.Fprintf(tw, "timeout\t%v\t%v\n", d.Timeout, m.Timeout)
	fmt.Fprintf(tw, "stdout\t%s\t%s\n", size(d.StdoutBytes), size(m.StdoutBytes))
	fmt.Fprintf(tw, "stderr\t%s\t%s\n", size(d.StderrBytes), size(m.StderrBytes))
	fmt.Fprintf(tw, "disk\t%s\t%s\n", size(d.DiskBytes), size(m.DiskBytes))
	if len(inv.Pools) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "POOL\tRUNTIME\tREADY\n")
		for _, p := range inv.Pools {
			name := p.Image
			if p.Egress {
				name += " (egress)"
			}
			if p.Preimport {
				name += " (preimport)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d of %d%s\n", name, p.Runtime, p.Ready, p.Size, poolFailing(p))
		}
	}
	if len(inv.Mounts) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "MOUNTS\t%s\n", strings.Join(inv.Mounts, " "))
	}
	if len(inv.Tools) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "TOOL\tRISK\tDESCRIPTION\n")
		for _, t := range inv.Tools {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Risk, t.Description)
		}
	}
	fmt.Fprintf(tw, "\nbackend: %s\n", inv.Backend)
	for i, id := range keyIDs(inv.SigningKeys) {
		what := "signing key"
		if i > 0 {
			what = "older key"
		}
		fmt.Fprintf(tw, "%s: %s\n", what, id)
	}
	tw.Flush()
}

// recipeState is the image's recipe digest, and whether the image was
// built from another version of it.
func recipeState(im task.ImageStatus) string {
	switch {
	case im.RecipeDigest == "":
		return "-"
	case im.LockedRecipe != "" && im.LockedRecipe != im.RecipeDigest:
		return im.RecipeDigest + " (STALE: built from " + im.LockedRecipe + ")"
	}
	return im.RecipeDigest
}

// poolFailing says, for a pool whose prepares fail, since when and why.
func poolFailing(p task.PoolStatus) string {
	if p.FailingSince.IsZero() {
		return ""
	}
	return fmt.Sprintf(", failing since %s: %s", p.FailingSince.UTC().Format(time.RFC3339), p.Failure)
}
