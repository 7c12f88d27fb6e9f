package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Table is the daemon's table of sessions, live and recently ended. S is
// what the engine keeps of a live session (its container, folders,
// chain); info finds the session's Info in it, which the table's lock
// guards.
type Table[S any] struct {
	info func(*S) *Info

	mu    sync.Mutex
	live  map[string]*S
	ended map[string]Info
	order []string // ended, oldest first, to forget past keepEnded
	// starting counts the sessions being created, which count as live,
	// by tenant.
	starting map[string]int
	dir      string // where live sessions are recorded, to be told lost
}

// keepEnded is how many ended sessions Find still reports.
const keepEnded = 1000

// NewTable is a table whose live sessions are recorded in dir.
func NewTable[S any](dir string, info func(*S) *Info) *Table[S] {
	return &Table[S]{info: info, live: map[string]*S{}, ended: map[string]Info{}, starting: map[string]int{}, dir: dir}
}

// Recover reports the sessions an earlier instance recorded and did not
// end: they are lost, as their containers went with the reap.
func (t *Table[S]) Recover() (lost []Info, err error) {
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		p := filepath.Join(t.dir, e.Name())
		var info Info
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &info) == nil && info.ID != "" {
			info.State, info.Reason = Lost, "the daemon that held it restarted; its container was removed"
			t.remember(info)
			lost = append(lost, info)
		}
		if err := os.Remove(p); err != nil {
			return lost, err
		}
	}
	return lost, nil
}

// remember keeps an ended session's info.
func (t *Table[S]) remember(info Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended[info.ID] = info
	t.order = append(t.order, info.ID)
	for len(t.order) > keepEnded {
		delete(t.ended, t.order[0])
		t.order = t.order[1:]
	}
}

// Room is what Reserve says.
type Room int

// What Reserve says.
const (
	Reserved Room = iota
	DaemonFull
	TenantFull
)

// Reserve counts a session of tenant about to start, when there is room
// for it on the daemon (max) and for the tenant (tenantMax, 0 for no bound
// of its own) among the sessions that are not paused.
func (t *Table[S]) Reserve(tenant string, max, tenantMax int) Room {
	t.mu.Lock()
	defer t.mu.Unlock()
	starting := 0
	for _, n := range t.starting {
		starting += n
	}
	running := 0
	for _, sess := range t.live {
		if t.info(sess).State != Paused {
			running++
		}
	}
	if running+starting >= max {
		return DaemonFull
	}
	if tenantMax > 0 {
		mine := t.starting[tenant]
		for _, sess := range t.live {
			if info := t.info(sess); info.Tenant == tenant && info.State != Paused {
				mine++
			}
		}
		if mine >= tenantMax {
			return TenantFull
		}
	}
	t.starting[tenant]++
	return Reserved
}

// Paused counts the paused sessions, on the daemon and of tenant: they
// are bounded apart from the running ones (see Reserve, which does not
// count them).
func (t *Table[S]) Paused(tenant string) (all, mine int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sess := range t.live {
		if info := t.info(sess); info.State == Paused {
			all++
			if info.Tenant == tenant {
				mine++
			}
		}
	}
	return all, mine
}

// Unreserve forgets a session of tenant that did not start.
func (t *Table[S]) Unreserve(tenant string) {
	t.mu.Lock()
	t.unreserveLocked(tenant)
	t.mu.Unlock()
}

func (t *Table[S]) unreserveLocked(tenant string) {
	if t.starting[tenant]--; t.starting[tenant] <= 0 {
		delete(t.starting, tenant)
	}
}

// Add makes a reserved session live: recorded on disk first, so that a
// daemon that dies now tells it lost when it starts again.
func (t *Table[S]) Add(sess *S) error {
	info := t.Info(sess)
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(t.dir, info.ID+".json"), b, 0o600); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unreserveLocked(info.Tenant)
	t.live[info.ID] = sess
	return nil
}

// End takes a live session out of the table in state, and remembers it
// ended; it is false when the session is not live. The caller then
// removes what the session holds: a call never finds a session neither
// live nor ended.
func (t *Table[S]) End(id string, state State, reason string) (*S, Info, bool) {
	t.mu.Lock()
	sess, ok := t.live[id]
	var info Info
	if ok {
		delete(t.live, id)
		in := t.info(sess)
		in.State, in.Reason = state, reason
		info = *in
	}
	t.mu.Unlock()
	if !ok {
		return nil, Info{}, false
	}
	t.remember(info)
	_ = os.Remove(filepath.Join(t.dir, id+".json"))
	return sess, info, true
}

// Find reports a session, live (then with it) or ended.
func (t *Table[S]) Find(id string) (Info, *S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sess, ok := t.live[id]; ok {
		return *t.info(sess), sess, true
	}
	info, ok := t.ended[id]
	return info, nil, ok
}

// Info is a copy of a session's info.
func (t *Table[S]) Info(sess *S) Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return *t.info(sess)
}

// Update changes a session's info under the table's lock.
func (t *Table[S]) Update(sess *S, change func(*Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	change(t.info(sess))
}

// Count is how many sessions are live.
func (t *Table[S]) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// List reports the live sessions that may says, oldest first.
func (t *Table[S]) List(may func(Info) bool) []Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Info, 0, len(t.live))
	for _, sess := range t.live {
		if info := *t.info(sess); may(info) {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// IDs are the live sessions' ids.
func (t *Table[S]) IDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.live))
	for id := range t.live {
		ids = append(ids, id)
	}
	return ids
}

// Due is a session whose time is up, and why.
type Due struct{ ID, Why string }

// Due lists the live sessions whose TTL or idle TTL passed at now; one for
// which busy is true (a call is running) is idle only once the call ended.
func (t *Table[S]) Due(now time.Time, busy func(*S) bool) []Due {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []Due
	for id, sess := range t.live {
		info := t.info(sess)
		switch {
		case !now.Before(info.ExpiresAt):
			due = append(due, Due{id, "its TTL passed"})
		case !now.Before(info.IdleExpiresAt) && !busy(sess):
			due = append(due, Due{id, "its idle TTL passed"})
		}
	}
	return due
}
