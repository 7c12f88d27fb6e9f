package claim

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// holdEnv makes the test binary a daemon that takes the claim of instance
// "held" in the folder the variable names, then waits to be killed.
const holdEnv = "CLAIM_TEST_HOLD"

var subnet = netip.MustParsePrefix("100.72.0.0/16")

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := Take(dir, Request{Instance: "held", UIDFirst: 1000, UIDCount: 100, Subnet: subnet}); err != nil {
			os.Exit(3)
		}
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func take(t *testing.T, dir string, r Request) *Claim {
	t.Helper()
	c, err := Take(dir, r)
	if err != nil {
		t.Fatalf("Take(%+v) = %v", r, err)
	}
	t.Cleanup(func() { c.Release() })
	return c
}

func TestOverlappingClaimsAreRefusedByName(t *testing.T) {
	dir := t.TempDir()
	take(t, dir, Request{Instance: "a", UIDFirst: 1000, UIDCount: 100, Subnet: subnet})
	for _, tt := range []struct {
		name string
		r    Request
		want string
	}{
		{"the same instance", Request{Instance: "a", UIDFirst: 5000, UIDCount: 10}, `instance "a" is held by the live daemon "a"`},
		{"overlapping uids", Request{Instance: "b", UIDFirst: 1099, UIDCount: 10}, "uid range 1099:10 is held by the live daemon \"a\""},
		{"an overlapping subnet", Request{Instance: "b", UIDFirst: 5000, UIDCount: 10, Subnet: netip.MustParsePrefix("100.72.8.0/24")}, "egress subnet 100.72.8.0/24 is held"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Take(dir, tt.r)
			if !errdefs.IsAlreadyExists(err) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "pid") {
				t.Fatalf("Take() = %v, want a refusal saying %q and the holder's pid", err, tt.want)
			}
		})
	}
	// Disjoint: both hold.
	take(t, dir, Request{Instance: "b", UIDFirst: 1100, UIDCount: 100, Subnet: netip.MustParsePrefix("100.73.0.0/16")})
	// A holder without an egress subnet is described without one.
	take(t, dir, Request{Instance: "c", UIDFirst: 9000, UIDCount: 10})
	want := fmt.Sprintf(`instance "c" is held by the live daemon "c" (pid %d; uids 9000:10): give this daemon another --instance, or stop the other: already exists`, os.Getpid())
	if _, err := Take(dir, Request{Instance: "c", UIDFirst: 9100, UIDCount: 10}); err == nil || err.Error() != want {
		t.Errorf("Take() = %v, want %q", err, want)
	}
}

func TestDefaultsMoveToTheNextFreeBlock(t *testing.T) {
	dir := t.TempDir()
	r := Request{UIDFirst: 1000, UIDCount: 100, Subnet: subnet, MoveUIDs: true, MoveSubnet: true}
	var got []string
	for _, name := range []string{"a", "b", "c"} {
		r.Instance = name
		c := take(t, dir, r)
		got = append(got, c.Subnet.String())
		if want := 1000 + 100*uint32(len(got)-1); c.UIDFirst != want || c.UIDCount != 100 {
			t.Errorf("%s got uids %d:%d, want %d:100", name, c.UIDFirst, c.UIDCount, want)
		}
	}
	if strings.Join(got, " ") != "100.72.0.0/16 100.73.0.0/16 100.74.0.0/16" {
		t.Errorf("subnets = %v", got)
	}
}

func TestReleaseFreesTheClaim(t *testing.T) {
	dir := t.TempDir()
	c, err := Take(dir, Request{Instance: "a", UIDFirst: 1, UIDCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	take(t, dir, Request{Instance: "a", UIDFirst: 1, UIDCount: 1})
}

func TestBadInstanceNamesAreRefused(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b"} {
		if _, err := Take(t.TempDir(), Request{Instance: name, UIDFirst: 1, UIDCount: 1}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Take(%q) = %v, want invalid argument", name, err)
		}
	}
}

// TestAKilledDaemonsClaimIsTakenOver: another process holds a claim, which
// refuses an overlap while it lives; killed with -9, its claim is stale
// and the same request succeeds.
func TestAKilledDaemonsClaimIsTakenOver(t *testing.T) {
	dir := t.TempDir()
	cmd := testutil.StartHelper(t, holdEnv, dir, filepath.Join(dir, "ready"), "the holder of a claim")
	r := Request{Instance: "held", UIDFirst: 1050, UIDCount: 10}
	if _, err := Take(dir, r); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("Take() while the holder lives = %v, want a refusal", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	take(t, dir, r)
}
