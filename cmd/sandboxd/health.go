package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// runHealth asks the daemon's health service whether it serves: exit 0 when
// it does, 1 when it does not answer SERVING (draining, stopping, or down).
// A serving daemon whose pool fails to prepare containers is reported
// degraded, one line per failing pool, before "serving".
// It is what a container's readiness probe runs, whatever TLS the network
// listeners speak.
func runHealth(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := verbFlags("health", stderr)
	c.register(fs)
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	client, err := c.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if !client.Healthy(ctx) {
		fmt.Fprintln(stderr, "sandboxd: not serving")
		return exitError{1}
	}
	// Serving, but a pool whose every prepare fails is a daemon whose
	// runs will likely fail too: say so, without failing the probe, since
	// runs of the other images may still work.
	if inv, err := client.Inventory(ctx); err == nil {
		for _, p := range inv.Pools {
			if s := poolFailing(p); s != "" {
				fmt.Fprintf(stdout, "degraded: pool %s on %s%s\n", p.Image, p.Runtime, s)
			}
		}
	}
	fmt.Fprintln(stdout, "serving")
	return nil
}
