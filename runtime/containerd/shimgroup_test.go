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
	heldBack(t, ran, "a second task was made while the group's first was being made")
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

	nothing := func() error { return nil }
	for range 4 {
		if err := s.remove("g", true, nothing); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.remove("other", true, nothing); err != nil {
		t.Fatal(err)
	}
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

// TestShimGroupLastGoesAlone: the deleting of a group's last task waits
// for the makings that joined the group, and a making that comes while it
// deletes waits for it and then founds the group anew; deleting a task
// that is not the last waits for nothing.
func TestShimGroupLastGoesAlone(t *testing.T) {
	var s shimGroups
	nothing := func() error { return nil }
	for range 2 {
		if err := s.create("g", nothing); err != nil {
			t.Fatal(err)
		}
	}
	// A making joins the group and holds on.
	inside, release, joined := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() { joined <- s.create("g", func() error { close(inside); <-release; return nil }) }()
	<-inside
	// Not the last: deleted at once.
	if err := s.remove("g", true, nothing); err != nil {
		t.Fatal(err)
	}
	// The last made task: its deleting waits for the joined making.
	lastRan, lastDone := make(chan struct{}), make(chan error)
	go func() { lastDone <- s.remove("g", true, func() error { close(lastRan); return nil }) }()
	heldBack(t, lastRan, "the group's last task was deleted while a task was being made in its shim")
	close(release)
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	if err := <-lastDone; err != nil {
		t.Fatal(err)
	}

	// The joined task is now the last: a making that comes while it is
	// being deleted waits, then founds.
	deleting, finish, deleted := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() { deleted <- s.remove("g", true, func() error { close(deleting); <-finish; return nil }) }()
	<-deleting
	madeRan, madeDone := make(chan struct{}), make(chan error)
	go func() { madeDone <- s.create("g", func() error { close(madeRan); return nil }) }()
	heldBack(t, madeRan, "a task was made while the group's last was being deleted")
	close(finish)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if err := <-madeDone; err != nil {
		t.Fatal(err)
	}

	// A task a cancelled making left, never counted, is deleted too, and
	// the delete's error is returned.
	if err := s.remove("g", true, nothing); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	if err := s.remove("g", false, func() error { return refused }); err != refused {
		t.Fatalf("remove() = %v, want the delete's error", err)
	}
	if len(s.m) != 0 {
		t.Fatalf("groups left with every task deleted: %v", s.m)
	}
}

// heldBack fails t if ran is closed within 50 ms: the work it marks was
// let through.
func heldBack(t *testing.T, ran <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-ran:
		t.Fatal(failure)
	case <-time.After(50 * time.Millisecond):
	}
}
