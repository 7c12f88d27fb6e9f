package containerd

import (
	"errors"
	"testing"
	"time"
)

// TestShimGroupFoundsAlone: while a group has no task, its makings go one
// at a time; once one lives, they go side by side; a group whose tasks
// are all deleted, or whose founding failed, founds alone again.
func TestShimGroupFoundsAlone(t *testing.T) {
	var s shimGroups
	inFounding := make(chan struct{})
	release := make(chan struct{})
	founded := make(chan error)
	go func() {
		founded <- s.create("g", func() error {
			close(inFounding)
			<-release
			return nil
		})
	}()
	<-inFounding
	second := make(chan error)
	ran := make(chan struct{})
	go func() {
		second <- s.create("g", func() error { close(ran); return nil })
	}()
	select {
	case <-ran:
		t.Fatal("a second task was made while the group's first was being made")
	case <-time.After(50 * time.Millisecond):
	}
	// Another group is not held up.
	if err := s.create("other", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-founded; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}

	// With tasks living, a making does not wait for another.
	blocked, inside, third := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() { third <- s.create("g", func() error { close(inside); <-blocked; return nil }) }()
	<-inside
	done := make(chan error)
	go func() { done <- s.create("g", func() error { return nil }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a making waited for another in a group that has tasks")
	}
	close(blocked)
	if err := <-third; err != nil {
		t.Fatal(err)
	}

	for range 4 {
		s.deleted("g")
	}
	s.deleted("other")
	if len(s.m) != 0 {
		t.Fatalf("groups left with every task deleted: %v", s.m)
	}

	// A failed founding leaves the group empty: the next founds alone.
	if err := s.create("g", func() error { return errors.New("refused") }); err == nil {
		t.Fatal("the making's error was lost")
	}
	if len(s.m) != 0 {
		t.Fatalf("a failed founding left %v", s.m)
	}
}
