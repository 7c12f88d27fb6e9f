// Package hostuid is the host uids sandboxd gives its containers: the
// operator's range, checked against the host's accounts and subordinate
// ranges, and the allocator that gives each container an id no other
// container holds.
package hostuid

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// Range is the host uids (and gids, the same numbers) that sandboxd
// gives its sandboxes, one per container: no sandbox shares a uid with a
// person, a service or another sandbox, so that no host user but root can
// reach a task's files, and no task another's.
type Range struct {
	First uint32
	Count uint32
}

// DefaultRange lies far above the ids that distributions hand out to
// accounts (below 65536) and to subordinate ranges (from 100000, 65536 per
// user); New checks it against this host's anyway.
func DefaultRange() Range { return Range{First: 1_500_000_000, Count: 1 << 16} }

func (r Range) String() string { return fmt.Sprintf("%d:%d", r.First, r.Count) }

// Contains says whether id is in the range.
func (r Range) Contains(id uint32) bool { return id >= r.First && id-r.First < r.Count }

// ParseRange reads FIRST:COUNT.
func ParseRange(s string) (Range, error) {
	first, count, ok := strings.Cut(s, ":")
	f, err1 := strconv.ParseUint(first, 10, 32)
	c, err2 := strconv.ParseUint(count, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("%q is not FIRST:COUNT", s)
	}
	return Range{First: uint32(f), Count: uint32(c)}, nil
}

// Validate refuses a range that is empty, wraps, or starts at the ids of
// root, accounts or nobody.
func (r Range) Validate() error {
	switch {
	case r.Count < 16:
		return fmt.Errorf("uid range %s: fewer than 16 ids", r)
	case uint64(r.First)+uint64(r.Count) > 1<<32-1:
		return fmt.Errorf("uid range %s goes past the largest id", r)
	case r.First < 65536:
		return fmt.Errorf("uid range %s starts among the ids of accounts (below 65536)", r)
	}
	return nil
}

// CheckHost refuses a range that holds an id of /etc/passwd or
// /etc/group, or overlaps a subordinate range of /etc/subuid or
// /etc/subgid: a user who owns subordinate ids can map them in a user
// namespace of its own and act as that uid.
func (r Range) CheckHost(etc string) error {
	for _, f := range []struct {
		name  string
		field int // the field that holds the id
	}{{"passwd", 2}, {"group", 2}} {
		err := eachLine(etc+"/"+f.name, func(fields []string) error {
			if len(fields) <= f.field {
				return nil
			}
			id, err := strconv.ParseUint(fields[f.field], 10, 32)
			if err == nil && r.Contains(uint32(id)) {
				return fmt.Errorf("uid range %s holds the id %d of %s in %s/%s", r, id, fields[0], etc, f.name)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, name := range []string{"subuid", "subgid"} {
		err := eachLine(etc+"/"+name, func(fields []string) error {
			if len(fields) < 3 {
				return nil
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			count, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 != nil || err2 != nil {
				return nil
			}
			if start < uint64(r.First)+uint64(r.Count) && uint64(r.First) < start+count {
				return fmt.Errorf("uid range %s overlaps the subordinate ids %d:%d of %s in %s/%s", r, start, count, fields[0], etc, name)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eachLine calls fn with the colon-separated fields of every line of a
// file; a missing file has no lines.
func eachLine(path string, fn func([]string) error) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(strings.Split(line, ":")); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Allocator hands out the ids of a range, each to one container at a time.
type Allocator struct {
	r Range

	mu    sync.Mutex
	next  uint32 // offset of the next id to try
	inUse map[uint32]bool
}

// NewAllocator hands out the ids of r.
func NewAllocator(r Range) *Allocator { return &Allocator{r: r, inUse: map[uint32]bool{}} }

// Take returns an id that no other container has, going round the range
// so that an id is reused as late as possible.
func (u *Allocator) Take() (uint32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for range u.r.Count {
		id := u.r.First + u.next
		u.next = (u.next + 1) % u.r.Count
		if !u.inUse[id] {
			u.inUse[id] = true
			return id, nil
		}
	}
	return 0, fmt.Errorf("every uid of the range %s is in use: %w", u.r, errdefs.ErrResourceExhausted)
}

// Give returns an id once its container and files are gone.
func (u *Allocator) Give(id uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.inUse, id)
}

// InUse is how many ids are held.
func (u *Allocator) InUse() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.inUse)
}
