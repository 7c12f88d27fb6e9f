package task

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/fake"
)

// TestEachContainerHasAUIDOfItsOwn checks the uids of containers: each in
// the range, none shared by two live containers, and pooled ones too.
func TestEachContainerHasAUIDOfItsOwn(t *testing.T) {
	rt := fake.New(untilKilled)
	s := pooled(t, rt, 2, nil)
	if err := s.PoolReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		go s.Run(ctx, Request{Program: code("x")}, newRecorder())
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.Running()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	seen := map[string]bool{}
	specs := rt.LiveSpecs()
	for _, spec := range specs {
		uid, gid := spec.IDs()
		if !s.cfg.UIDs.Contains(uid) || uid != gid || seen[spec.User] {
			t.Errorf("container %s runs as %s: want a uid of %s of its own", spec.ID, spec.User, s.cfg.UIDs)
		}
		seen[spec.User] = true
	}
	if len(specs) < 3 {
		t.Errorf("%d containers live for 3 runs", len(specs))
	}
}

func TestUIDRangeRefusesTheHostsIDs(t *testing.T) {
	etc := t.TempDir()
	files := map[string]string{
		"passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nsvc:x:2000005:2000005::/:/bin/false\n",
		"group":  "root:x:0:\nalice:x:1000:\n",
		"subuid": "alice:100000:65536\nbob:3000000:65536\n",
		"subgid": "alice:100000:65536\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		r    UIDRange
		want string
	}{
		{UIDRange{First: 2000000, Count: 100}, "svc"},
		{UIDRange{First: 3010000, Count: 100}, "bob"},
		{UIDRange{First: 170000, Count: 100}, ""},
		{DefaultUIDRange(), ""},
	} {
		err := tt.r.checkHostIDs(etc)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("range %s: %v, want a refusal naming %q", tt.r, err, tt.want)
		}
	}
	if err := (UIDRange{First: 1000, Count: 100}).validate(); err == nil {
		t.Error("a range among the accounts' ids was accepted")
	}
}
