// Package testprog is the program of the runtime contract suite
// (runtime/runtimetest). Real containers run it as a static binary
// (cmd/testprog) bound into them; the fake runtime runs the same code in
// its process, so that a behaviour the suite asks for means the same on
// every runtime.
//
// Its arguments are steps, run in order:
//
//	out TEXT     write TEXT to stdout
//	err TEXT     write TEXT to stderr
//	cat          copy stdin to stdout until its end
//	env NAME     write the value of the variable NAME and a newline
//	pwd          write the working directory and a newline
//	id           write UID:GID and a newline
//	call LINE    write LINE and a newline on the tool channel, and copy
//	             the line it answers to stdout
//	sleep MS     wait MS milliseconds
//	block        wait until killed
//	serve PORT   listen on PORT of the loopback, write "listening" and a
//	             newline, then answer one connection: "hello" and a
//	             newline, then what it sends, until its half-close
//	exit N       exit with code N
//	signal N     end by signal N (exit code 128+N)
//
// After the last step it exits with 0.
package testprog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Process is what a run of the program sees of its process.
type Process struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv, Dir and IDs report the environment, working directory and
	// user.
	Getenv func(string) string
	Dir    func() string
	IDs    func() (uid, gid int)
	// Signal ends the process by signal n; it does not return.
	Signal func(n int)
	// Tools is the tool channel, or nil.
	Tools io.ReadWriter
}

// Run runs the steps of args and returns the exit code. It returns 137,
// as a kill would, when ctx is done while it blocks.
func Run(ctx context.Context, p Process, args []string) int {
	var answers *bufio.Reader
	for i := 0; i < len(args); i++ {
		arg := func() string {
			if i+1 >= len(args) {
				fmt.Fprintf(p.Stderr, "testprog: %s needs an argument\n", args[i])
				return ""
			}
			i++
			return args[i]
		}
		switch args[i] {
		case "out":
			io.WriteString(p.Stdout, arg())
		case "err":
			io.WriteString(p.Stderr, arg())
		case "cat":
			io.Copy(p.Stdout, p.Stdin)
		case "env":
			fmt.Fprintln(p.Stdout, p.Getenv(arg()))
		case "pwd":
			fmt.Fprintln(p.Stdout, p.Dir())
		case "id":
			uid, gid := p.IDs()
			fmt.Fprintf(p.Stdout, "%d:%d\n", uid, gid)
		case "call":
			line := arg()
			if p.Tools == nil {
				fmt.Fprintln(p.Stderr, "testprog: no tool channel")
				return 2
			}
			if answers == nil {
				answers = bufio.NewReader(p.Tools)
			}
			if _, err := io.WriteString(p.Tools, line+"\n"); err != nil {
				fmt.Fprintf(p.Stderr, "testprog: call: %v\n", err)
				return 2
			}
			answer, err := answers.ReadString('\n')
			if err != nil {
				fmt.Fprintf(p.Stderr, "testprog: answer: %v\n", err)
				return 2
			}
			io.WriteString(p.Stdout, answer)
		case "sleep":
			ms, err := strconv.Atoi(arg())
			if err != nil {
				fmt.Fprintf(p.Stderr, "testprog: sleep: %v\n", err)
				return 2
			}
			select {
			case <-ctx.Done():
				return 137
			case <-time.After(time.Duration(ms) * time.Millisecond):
			}
		case "block":
			// A timer, not a bare wait, so that the Go runtime does not
			// take a never-done ctx for a deadlock.
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Hour):
				}
			}
			return 137
		case "serve":
			if code := serve(ctx, p, arg()); code != 0 {
				return code
			}
		case "exit", "signal":
			verb := args[i]
			n, err := strconv.Atoi(arg())
			if err != nil {
				fmt.Fprintf(p.Stderr, "testprog: %s: %v\n", verb, err)
				return 2
			}
			if verb == "signal" {
				p.Signal(n)
				return 128 + n
			}
			return n
		default:
			fmt.Fprintf(p.Stderr, "testprog: unknown step %q\n", args[i])
			return 2
		}
	}
	return 0
}

// serve answers one connection on port of the loopback.
func serve(ctx context.Context, p Process, port string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintf(p.Stderr, "testprog: serve: %v\n", err)
		return 2
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	io.WriteString(p.Stdout, "listening\n")
	conn, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return 137
		}
		fmt.Fprintf(p.Stderr, "testprog: serve: %v\n", err)
		return 2
	}
	defer conn.Close()
	io.WriteString(conn, "hello\n")
	io.Copy(conn, conn)
	return 0
}
