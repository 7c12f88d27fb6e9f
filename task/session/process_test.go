package session

import (
	"strings"
	"testing"
)

// TestLogKeepsTheLastBytesAndCountsAll: a reader at any offset gets what
// came since, and where it starts when older bytes were dropped.
func TestLogKeepsTheLastBytesAndCountsAll(t *testing.T) {
	wake := make(chan struct{}, 1)
	l := NewLog(8, wake)
	l.Write([]byte("abcd"))
	l.Write([]byte("efgh"))
	if data, start, next := l.Read(2, 100); string(data) != "cdefgh" || start != 2 || next != 8 {
		t.Fatalf("Read(2) = %q, %d, %d", data, start, next)
	}
	l.Write([]byte("ij"))
	if data, start, next := l.Read(0, 100); string(data) != "cdefghij" || start != 2 || next != 10 {
		t.Fatalf("Read(0) after a drop = %q, %d, %d; want from 2", data, start, next)
	}
	if data, start, next := l.Read(4, 3); string(data) != "efg" || start != 4 || next != 7 {
		t.Fatalf("Read(4, 3) = %q, %d, %d", data, start, next)
	}
	if data, start, next := l.Read(99, 10); len(data) != 0 || start != 10 || next != 10 {
		t.Fatalf("Read past the end = %q, %d, %d", data, start, next)
	}
	l.Write([]byte(strings.Repeat("z", 20) + "12345678"))
	if data, start, _ := l.Read(0, 100); string(data) != "12345678" || start != 30 || l.Total() != 38 {
		t.Fatalf("a write past the cap kept %q from %d of %d", data, start, l.Total())
	}
	select {
	case <-wake:
	default:
		t.Fatal("a write woke no reader")
	}
}
