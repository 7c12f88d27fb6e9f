package containerd

import (
	"strings"
	"sync"
)

// shimGroupOf names the shim group of an instance's containers of one OCI
// runtime (see withShimGroup).
func shimGroupOf(instance, rt string) string {
	if rt == "" {
		rt = "runc"
	}
	return strings.Join([]string{"sandboxd", instance, rt}, "-")
}

// shimGroups keeps a group's shim from being started twice, and from
// ending under a task being made. containerd 1.6's `shim start` for a group
// whose shim is not up yet races another's for the group's socket, and
// both start a shim; one then serves nothing and never ends (containerd's
// log: two shims of one group loading their plugins within a millisecond,
// as a new pool made its two images' containers). And the shim ends when
// its last task is deleted: a making whose `shim start` found it a moment
// before fails ("dial unix /run/containerd/s/...: no such file"). So a
// group's first task is made alone and its last deleted alone; the rest
// are made and deleted side by side.
type shimGroups struct {
	mu sync.Mutex
	m  map[string]*groupTasks
}

type groupTasks struct {
	// alone is held for writing by the making of the group's first task
	// and the deleting of its last, for reading by the other makings.
	alone sync.RWMutex
	// live counts the tasks made and not being deleted, users those and
	// the makings and deletings under way; both under shimGroups.mu.
	live, users int
}

// create runs newTask, which makes a task in group: alone when no task of
// the group lives, else while none can be the last to go.
func (s *shimGroups) create(group string, newTask func() error) error {
	g := s.use(group)
	err := s.making(g, newTask)
	if err != nil {
		// A task made keeps its user until its removal.
		s.release(group, g)
	}
	return err
}

// making runs newTask under g's lock, and counts the task it made.
func (s *shimGroups) making(g *groupTasks, newTask func() error) error {
	for {
		alone := !s.lives(g)
		if alone {
			g.alone.Lock()
		} else {
			g.alone.RLock()
		}
		// The last task may have gone between the look and the lock;
		// with the read lock held, a deleting of the last one waits.
		if alone || s.lives(g) {
			err := newTask()
			if err == nil {
				s.mu.Lock()
				g.live++
				s.mu.Unlock()
			}
			if alone {
				g.alone.Unlock()
			} else {
				g.alone.RUnlock()
			}
			return err
		}
		g.alone.RUnlock()
	}
}

// remove runs deleteTask, which deletes a task of group, alone when the
// task may be the shim's last. counted says create made it: a task that a
// cancelled making left behind was never counted, and is deleted alone if
// the group has no other. group "" is a task of no known group. The task
// is counted gone even when the delete fails: a group thought empty only
// has its next task made alone.
func (s *shimGroups) remove(group string, counted bool, deleteTask func() error) error {
	if group == "" {
		return deleteTask()
	}
	g := s.use(group)
	// Released after the unlock below: a group dropped while locked
	// would let a making found it anew beside this deleting.
	defer s.release(group, g)
	s.mu.Lock()
	if counted {
		g.live--
		g.users-- // the made task's; this removal's user holds g
	}
	last := g.live == 0
	s.mu.Unlock()
	if last {
		g.alone.Lock()
		defer g.alone.Unlock()
	}
	return deleteTask()
}

// use has group's tasks, made if need be, with one more user.
func (s *shimGroups) use(group string) *groupTasks {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*groupTasks{}
	}
	g := s.m[group]
	if g == nil {
		g = &groupTasks{}
		s.m[group] = g
	}
	g.users++
	return g
}

// lives says whether g has a task made and not being deleted.
func (s *shimGroups) lives(g *groupTasks) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return g.live > 0
}

// release drops a user of g, and g with its last.
func (s *shimGroups) release(group string, g *groupTasks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.users--
	if g.users == 0 {
		delete(s.m, group)
	}
}
