package hostuid

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestRangeRefusesTheHostsIDs(t *testing.T) {
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
		r    Range
		want string
	}{
		{Range{First: 2000000, Count: 100}, "svc"},
		{Range{First: 3010000, Count: 100}, "bob"},
		{Range{First: 170000, Count: 100}, ""},
		{DefaultRange(), ""},
	} {
		err := tt.r.CheckHost(etc)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("range %s: %v, want a refusal naming %q", tt.r, err, tt.want)
		}
	}
	if err := (Range{First: 1000, Count: 100}).Validate(); err == nil {
		t.Error("a range among the accounts' ids was accepted")
	}
}

func TestAllocatorGivesEachIDOnceAndReusesLate(t *testing.T) {
	a := NewAllocator(Range{First: 200000, Count: 3})
	var got []uint32
	for range 3 {
		id, err := a.Take()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if _, err := a.Take(); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("a fourth id from a range of 3: %v, want resource exhausted", err)
	}
	a.Give(got[0])
	a.Give(got[2])
	if id, _ := a.Take(); id != got[0] {
		t.Fatalf("took %d, want %d: the id given back first is reused first", id, got[0])
	}
	if a.InUse() != 2 {
		t.Fatalf("%d ids in use, want 2", a.InUse())
	}
}
