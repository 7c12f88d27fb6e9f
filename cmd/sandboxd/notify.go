package main

import (
	"errors"
	"net"
	"os"
	"strings"
)

// notifySystemd tells the service manager that started the daemon (a
// systemd unit of Type=notify) how it is: "READY=1" once it serves,
// "RELOADING=1", "STOPPING=1". It does nothing where NOTIFY_SOCKET is not
// set, as when the daemon is not started by systemd.
func notifySystemd(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return errors.New("NOTIFY_SOCKET is neither a path nor an abstract socket")
	}
	// An abstract socket's name starts with a NUL byte, written as @.
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
