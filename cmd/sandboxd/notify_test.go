package main

import (
	"net"
	"path/filepath"
	"testing"
)

// TestNotifySystemd: the state reaches NOTIFY_SOCKET as one datagram, and
// without NOTIFY_SOCKET nothing is sent and nothing fails.
func TestNotifySystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := notifySystemd("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if err := notifySystemd("READY=1\nSTATUS=serving"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1\nSTATUS=serving" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	t.Setenv("NOTIFY_SOCKET", "relative")
	if err := notifySystemd("READY=1"); err == nil {
		t.Fatal("a NOTIFY_SOCKET that is not a path was taken")
	}
}
