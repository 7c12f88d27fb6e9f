package session

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

type held struct {
	info Info
	busy bool
}

func newTable(t *testing.T) (*Table[held], string) {
	dir := filepath.Join(t.TempDir(), "sessions")
	tb := NewTable(dir, func(h *held) *Info { return &h.info })
	if lost, err := tb.Recover(); err != nil || len(lost) != 0 {
		t.Fatalf("Recover() of a new folder = %v, %v", lost, err)
	}
	return tb, dir
}

func TestReserveBoundsTheDaemonAndEachTenant(t *testing.T) {
	tb, _ := newTable(t)
	for _, step := range []struct {
		tenant string
		want   Room
	}{{"team-a", Reserved}, {"team-a", TenantFull}, {"team-b", Reserved}, {"team-c", DaemonFull}} {
		if got := tb.Reserve(step.tenant, 2, 1); got != step.want {
			t.Fatalf("Reserve(%s) = %d, want %d", step.tenant, got, step.want)
		}
	}
	// A live session counts like a reserved one.
	if err := tb.Add(&held{info: Info{ID: "s1", Tenant: "team-a", State: Active}}); err != nil {
		t.Fatal(err)
	}
	if got := tb.Reserve("team-a", 10, 1); got != TenantFull {
		t.Fatalf("a second session of team-a beside its live one: %d", got)
	}
	tb.Unreserve("team-b")
	if len(tb.starting) != 0 {
		t.Fatalf("left starting: %v", tb.starting)
	}
}

// TestARestartTellsLiveSessionsLost: what Add records and End does not
// remove is what a restarted daemon reports lost, once.
func TestARestartTellsLiveSessionsLost(t *testing.T) {
	tb, dir := newTable(t)
	for _, id := range []string{"kept", "ended"} {
		tb.Reserve("team-a", 10, 0)
		if err := tb.Add(&held{info: Info{ID: id, Tenant: "team-a", State: Active}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, info, ok := tb.End("ended", Deleted, "deleted"); !ok || info.State != Deleted {
		t.Fatalf("End() = %+v, %v", info, ok)
	}
	if _, _, ok := tb.End("ended", Deleted, "again"); ok {
		t.Fatal("a session ended twice")
	}
	if info, sess, ok := tb.Find("ended"); !ok || sess != nil || info.Reason != "deleted" {
		t.Fatalf("Find() of an ended session = %+v, %v, %v", info, sess, ok)
	}

	again := NewTable(dir, func(h *held) *Info { return &h.info })
	lost, err := again.Recover()
	if err != nil || len(lost) != 1 || lost[0].ID != "kept" || lost[0].State != Lost {
		t.Fatalf("Recover() = %+v, %v, want the one session not ended, lost", lost, err)
	}
	if info, _, ok := again.Find("kept"); !ok || info.State != Lost {
		t.Fatalf("the lost session is not reported: %+v", info)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("records left after Recover: %v", entries)
	}
}

func TestDueWaitsForTheRunningCall(t *testing.T) {
	tb, _ := newTable(t)
	now := time.Now()
	for _, h := range []*held{
		{info: Info{ID: "ttl", ExpiresAt: now, IdleExpiresAt: now.Add(time.Hour)}, busy: true},
		{info: Info{ID: "idle", ExpiresAt: now.Add(time.Hour), IdleExpiresAt: now}},
		{info: Info{ID: "idle-busy", ExpiresAt: now.Add(time.Hour), IdleExpiresAt: now}, busy: true},
		{info: Info{ID: "fresh", ExpiresAt: now.Add(time.Hour), IdleExpiresAt: now.Add(time.Minute)}},
	} {
		tb.Reserve("", 10, 0)
		if err := tb.Add(h); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, d := range tb.Due(now, func(h *held) bool { return h.busy }) {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"idle", "ttl"}) {
		t.Fatalf("due = %q, want the TTL and the idle session, not the busy idle one", ids)
	}
}

func TestEndedSessionsAreForgottenPastKeepEnded(t *testing.T) {
	tb, _ := newTable(t)
	for i := range keepEnded + 5 {
		tb.remember(Info{ID: string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	if len(tb.ended) != keepEnded || len(tb.order) != keepEnded {
		t.Fatalf("%d ended kept, want %d", len(tb.ended), keepEnded)
	}
}

// TestPausedSessionsAreBoundedApart: a paused session leaves room for a
// running one, on the daemon and for its tenant, and Paused counts it.
func TestPausedSessionsAreBoundedApart(t *testing.T) {
	tb, _ := newTable(t)
	tb.Reserve("team-a", 1, 1)
	if err := tb.Add(&held{info: Info{ID: "s1", Tenant: "team-a", State: Paused}}); err != nil {
		t.Fatal(err)
	}
	if got := tb.Reserve("team-a", 1, 1); got != Reserved {
		t.Fatalf("Reserve() beside a paused session = %d, want room", got)
	}
	if all, mine := tb.Paused("team-a"); all != 1 || mine != 1 {
		t.Errorf("Paused(team-a) = %d, %d; want 1, 1", all, mine)
	}
	if all, mine := tb.Paused("team-b"); all != 1 || mine != 0 {
		t.Errorf("Paused(team-b) = %d, %d; want 1, 0", all, mine)
	}
}
