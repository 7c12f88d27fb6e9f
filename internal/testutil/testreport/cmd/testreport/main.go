// Command testreport prints what CI prints at its end from the files of
// `go test -json` given as arguments: the slowest tests (-slowest N), or
// every failed test with the end of its output (-failed). It exits 1 when
// a test failed.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/internal/testutil/testreport"
)

func main() {
	slowest := flag.Int("slowest", 10, "how many of the slowest tests to list")
	failed := flag.Bool("failed", false, "list the failed tests with their output instead")
	lines := flag.Int("lines", 60, "with -failed, the last lines of each failure's output")
	flag.Parse()
	var r testreport.Report
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		err = r.Read(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", name, err)
			os.Exit(2)
		}
	}
	if *failed {
		r.WriteFailed(os.Stdout, *lines)
	} else {
		r.WriteSlowest(os.Stdout, *slowest)
	}
	if len(r.Failed()) > 0 {
		os.Exit(1)
	}
}
