package registry

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/task/run"
)

// TestAKeyIsOneRunAcrossARestart: the first Take claims the key, a retry
// of the same request gets its run, another request is refused naming the
// run; a run this process did not see end is LOST after a restart and is
// never claimed afresh.
func TestAKeyIsOneRunAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	k := NewKeys(dir)
	if _, _, err := k.Recover(time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, id, err := k.Take(ctx, "team-a", "k1", "sha256:req")
	if err != nil || c == nil || id != "" {
		t.Fatalf("first Take() = %v, %q, %v; want a claim", c, id, err)
	}
	if err := k.Bind(c, "run-1"); err != nil {
		t.Fatal(err)
	}
	if c2, id, err := k.Take(ctx, "team-a", "k1", "sha256:req"); err != nil || c2 != nil || id != "run-1" {
		t.Fatalf("a retry = %v, %q, %v; want run-1", c2, id, err)
	}
	if _, _, err := k.Take(ctx, "team-a", "k1", "sha256:other"); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("another request with the key: %v, want already exists", err)
	}
	if c3, _, err := k.Take(ctx, "team-b", "k1", "sha256:other"); err != nil || c3 == nil {
		t.Fatalf("another tenant's key of the same name: %v, %v; want its own claim", c3, err)
	}

	// The daemon dies with run-1 running: the next one tells it LOST.
	again := NewKeys(dir)
	runs, lost, err := again.Recover(time.Now(), "")
	if err != nil || len(lost) != 2 || len(runs) != 2 {
		t.Fatalf("Recover() = %d runs, %d lost, %v; want both claims lost", len(runs), len(lost), err)
	}
	kept, err := again.Lookup("team-a", "k1")
	if err != nil || kept == nil || kept.ID != "run-1" || kept.Result.Status != run.StatusLost {
		t.Fatalf("Lookup() = %+v, %v; want run-1 LOST", kept, err)
	}
	if c, id, err := again.Take(ctx, "team-a", "k1", "sha256:req"); c != nil || id != "run-1" || err != nil {
		t.Fatalf("a retry after the restart = %v, %q, %v; want run-1, not a new run", c, id, err)
	}
}

func TestAKeyGivenUpBeforeItRanIsFree(t *testing.T) {
	k := NewKeys(t.TempDir())
	if _, _, err := k.Recover(time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, _, err := k.Take(ctx, "team-a", "k1", "sha256:req")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.End(c, run.Info{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Lookup("team-a", "k1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the key's file after a run that never ran: %v", err)
	}
	if c, _, err := k.Take(ctx, "team-a", "k1", "sha256:other"); err != nil || c == nil {
		t.Fatalf("the freed key: %v, %v; want a new claim", c, err)
	}
	for _, bad := range []string{"", "with space", string(make([]byte, 129))} {
		if err := CheckKey(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("CheckKey(%q) = %v", bad, err)
		}
	}
}
