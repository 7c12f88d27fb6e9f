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

// shimGroups has a group's first task made alone. containerd 1.6's `shim
// start` for a group whose shim is not up yet races another's for the
// group's socket, and both start a shim; one then serves nothing and never
// ends (containerd's log: two shims of one group loading their plugins
// within a millisecond, as a new pool made its two images' containers).
type shimGroups struct {
	mu sync.Mutex
	m  map[string]*groupTasks
}

type groupTasks struct {
	// founding is held by the making of the group's first task.
	founding sync.Mutex
	// live counts the tasks made and not deleted, users those and the
	// makings under way; both under shimGroups.mu.
	live, users int
}

// create runs newTask, which makes a task in group, alone when no task of
// the group lives.
func (s *shimGroups) create(group string, newTask func() error) error {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*groupTasks{}
	}
	g := s.m[group]
	if g == nil {
		g = &groupTasks{}
		s.m[group] = g
	}
	g.users++
	s.mu.Unlock()

	g.founding.Lock()
	s.mu.Lock()
	founded := g.live > 0
	if founded {
		g.live++
	}
	s.mu.Unlock()
	if founded {
		g.founding.Unlock()
	}
	err := newTask()
	s.mu.Lock()
	switch {
	case err != nil && founded:
		g.live--
	case err == nil && !founded:
		g.live++
	}
	if err != nil {
		s.release(group, g)
	}
	s.mu.Unlock()
	if !founded {
		g.founding.Unlock()
	}
	return err
}

// deleted says that a task create made in group is gone; group "" is a
// task never made or already counted gone.
func (s *shimGroups) deleted(group string) {
	if group == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.m[group]
	g.live--
	s.release(group, g)
}

// release drops a user of g, and g with its last; s.mu is held.
func (s *shimGroups) release(group string, g *groupTasks) {
	g.users--
	if g.users == 0 {
		delete(s.m, group)
	}
}
