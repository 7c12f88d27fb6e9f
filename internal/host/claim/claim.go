// Package claim makes a daemon's hold on what it uses of the host explicit:
// its instance name (its containers, task folders and cgroups), its range
// of sandbox uids and its egress subnet. A daemon claims them before it
// touches anything, and two live daemons never hold overlapping claims.
//
// A claim is a file in a host-wide folder that its daemon keeps locked
// (flock) while it lives: the kernel drops the lock when the process dies,
// however it dies, so a claim whose lock can be taken is stale and is
// taken over.
package claim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// DefaultDir is where the daemons of a host record their claims.
const DefaultDir = "/run/sandboxd/claims"

// Request is what a daemon asks to hold.
type Request struct {
	Instance string
	// UIDFirst and UIDCount are the sandbox uids, [first, first+count).
	UIDFirst, UIDCount uint32
	// Subnet is the egress subnet; the zero prefix claims none.
	Subnet netip.Prefix
	// MoveUIDs and MoveSubnet let the claim take the next free block of
	// the same size when the one asked for is held: for the defaults, so
	// that two instances started with them do not collide.
	MoveUIDs, MoveSubnet bool
}

// record is a claim as its file holds it.
type record struct {
	Instance string       `json:"instance"`
	PID      int          `json:"pid"`
	UIDFirst uint32       `json:"uid_first"`
	UIDCount uint32       `json:"uid_count"`
	Subnet   netip.Prefix `json:"subnet,omitzero"`
}

// Claim is a claim held; Release gives it up.
type Claim struct {
	UIDFirst, UIDCount uint32
	Subnet             netip.Prefix
	file               *os.File
	path               string
}

// Release gives the claim up.
func (c *Claim) Release() error {
	err := os.Remove(c.path)
	return errors.Join(err, c.file.Close())
}

// Take claims what r asks for in dir, or refuses, naming the live holder of
// the overlap. Stale claims of dead daemons are removed.
func Take(dir string, r Request) (*Claim, error) {
	if r.Instance == "" || strings.ContainsAny(r.Instance, "/\x00") || r.Instance == "." || r.Instance == ".." {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("instance %q cannot name a claim", r.Instance))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claims folder: %w", err)
	}
	// One claimer at a time: what is read and what is written must not
	// interleave with another daemon's start.
	guard, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer guard.Close()
	if err := unix.Flock(int(guard.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", guard.Name(), err)
	}
	live, err := liveClaims(dir)
	if err != nil {
		return nil, err
	}
	mine := record{Instance: r.Instance, PID: os.Getpid(), UIDFirst: r.UIDFirst, UIDCount: r.UIDCount, Subnet: r.Subnet}
	for _, o := range live {
		if o.Instance == r.Instance {
			return nil, held(o, fmt.Sprintf("instance %q", r.Instance), "give this daemon another --instance, or stop the other")
		}
	}
	if mine.UIDFirst, err = freeUIDs(live, r); err != nil {
		return nil, err
	}
	if mine.Subnet, err = freeSubnet(live, r); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, r.Instance+".json")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := json.NewEncoder(f).Encode(mine); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &Claim{UIDFirst: mine.UIDFirst, UIDCount: mine.UIDCount, Subnet: mine.Subnet, file: f, path: path}, nil
}

// liveClaims reads the claims of live daemons and removes the others.
func liveClaims(dir string) ([]record, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var live []record
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue // removed meanwhile by its daemon
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			// Nobody holds it: its daemon is gone.
			os.Remove(path)
			f.Close()
			continue
		}
		var rec record
		err = json.NewDecoder(f).Decode(&rec)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("claim %s is held but unreadable: %w", path, err)
		}
		live = append(live, rec)
	}
	return live, nil
}

func held(o record, what, fix string) error {
	holds := fmt.Sprintf("pid %d; uids %d:%d", o.PID, o.UIDFirst, o.UIDCount)
	if o.Subnet.IsValid() {
		holds += "; egress subnet " + o.Subnet.String()
	}
	return fmt.Errorf("%s is held by the live daemon %q (%s): %s: %w", what, o.Instance, holds, fix, errdefs.ErrAlreadyExists)
}

// freeUIDs is the first uid of r's range, or of the next free block of the
// same size when r may move.
func freeUIDs(live []record, r Request) (uint32, error) {
	first := uint64(r.UIDFirst)
	for {
		var holder *record
		for i, o := range live {
			if first < uint64(o.UIDFirst)+uint64(o.UIDCount) && uint64(o.UIDFirst) < first+uint64(r.UIDCount) {
				holder = &live[i]
				break
			}
		}
		if holder == nil {
			return uint32(first), nil
		}
		if !r.MoveUIDs {
			return 0, held(*holder, fmt.Sprintf("uid range %d:%d", r.UIDFirst, r.UIDCount), "give this daemon a --uid-range of its own")
		}
		first += uint64(r.UIDCount)
		if first+uint64(r.UIDCount) > 1<<32-1 {
			return 0, fmt.Errorf("no free block of %d uids above %d: %w", r.UIDCount, r.UIDFirst, errdefs.ErrResourceExhausted)
		}
	}
}

// freeSubnet is r's subnet, or the next free one of the same size when r
// may move.
func freeSubnet(live []record, r Request) (netip.Prefix, error) {
	if !r.Subnet.IsValid() {
		return netip.Prefix{}, nil
	}
	p := r.Subnet.Masked()
	for range 256 {
		var holder *record
		for i, o := range live {
			if o.Subnet.IsValid() && o.Subnet.Overlaps(p) {
				holder = &live[i]
				break
			}
		}
		if holder == nil {
			return p, nil
		}
		if !r.MoveSubnet {
			return netip.Prefix{}, held(*holder, "egress subnet "+r.Subnet.String(), "give this daemon an --egress-subnet of its own")
		}
		next, ok := after(p)
		if !ok {
			break
		}
		p = next
	}
	return netip.Prefix{}, fmt.Errorf("no free egress subnet of size /%d after %v: %w", r.Subnet.Bits(), r.Subnet, errdefs.ErrResourceExhausted)
}

// after is the prefix of the same size that follows p.
func after(p netip.Prefix) (netip.Prefix, bool) {
	if !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	a := p.Addr().As4()
	n := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
	n += 1 << (32 - p.Bits())
	if n > 1<<32-1 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), p.Bits()), true
}
