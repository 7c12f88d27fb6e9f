package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
)

func runImages(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	client, closeConn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv, err := client.ListImages(ctx, &pb.ListImagesRequest{})
	if err != nil {
		return err
	}
	printInventory(stdout, inv)
	return nil
}

func printInventory(w io.Writer, inv *pb.ListImagesResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LANGUAGE\tIMAGE\tCOMMAND\n")
	for _, l := range inv.GetLanguages() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.GetName(), l.GetImage(), strings.Join(l.GetCommand(), " "))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "IMAGE\tDIGEST\tLOCK\n")
	for _, im := range inv.GetImages() {
		digest, lock := im.GetDigest(), "matches"
		switch {
		case !im.GetPresent():
			digest, lock = "(not built)", "-"
		case im.GetLockedDigest() == "":
			lock = "not locked"
		case im.GetLockedDigest() != im.GetDigest():
			lock = "DIFFERS: " + im.GetLockedDigest()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", im.GetName(), digest, lock)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "RUNTIME\tVERSION\tDEFAULT\tALLOWED\n")
	for _, r := range inv.GetRuntimes() {
		def, allowed := "", "no"
		if r.GetIsDefault() {
			def = "yes"
		}
		if r.GetAllowed() {
			allowed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.GetName(), r.GetVersion(), def, allowed)
	}
	fmt.Fprintln(tw)
	d, m := inv.GetDefaultLimits(), inv.GetMaxLimits()
	fmt.Fprintf(tw, "LIMIT\tDEFAULT\tMAXIMUM\n")
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	fmt.Fprintf(tw, "memory\t%s\t%s\n", size(d.GetMemoryBytes()), size(m.GetMemoryBytes()))
	fmt.Fprintf(tw, "cpu\t%d millicores\t%d millicores\n", d.GetCpuMillis(), m.GetCpuMillis())
	fmt.Fprintf(tw, "pids\t%d\t%d\n", d.GetPids(), m.GetPids())
	fmt.Fprintf(tw, "timeout\t%v\t%v\n", time.Duration(d.GetTimeoutMs())*time.Millisecond, time.Duration(m.GetTimeoutMs())*time.Millisecond)
	fmt.Fprintf(tw, "stdout\t%s\t%s\n", size(d.GetStdoutBytes()), size(m.GetStdoutBytes()))
	fmt.Fprintf(tw, "stderr\t%s\t%s\n", size(d.GetStderrBytes()), size(m.GetStderrBytes()))
	fmt.Fprintf(tw, "disk\t%s\t%s\n", size(d.GetDiskBytes()), size(m.GetDiskBytes()))
	if len(inv.GetPools()) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "POOL\tRUNTIME\tREADY\n")
		for _, p := range inv.GetPools() {
			fmt.Fprintf(tw, "%s\t%s\t%d of %d\n", p.GetImage(), p.GetRuntime(), p.GetReady(), p.GetSize())
		}
	}
	if len(inv.GetMounts()) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "MOUNTS\t%s\n", strings.Join(inv.GetMounts(), " "))
	}
	fmt.Fprintf(tw, "\nbackend: %s\n", inv.GetBackend())
	tw.Flush()
}
