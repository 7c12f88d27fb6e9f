package testutil

import (
	"testing"
	"time"
)

// WaitFor polls ok every millisecond until it holds, and fails the test
// when it has not within 5 s; what names it in the failure.
func WaitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come within 5s", what)
		}
	}
}
