package main

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

func TestClosersUnwindOnceInReverse(t *testing.T) {
	var got []string
	var cl closers
	for _, name := range []string{"claim", "init", "gateway", "backend"} {
		cl.push(name, func() error {
			got = append(got, name)
			if name == "gateway" {
				return errors.New("busy") // logged; the rest still close
			}
			return nil
		})
	}
	log := testutil.Logger(t, slog.LevelWarn)
	cl.close(log)
	cl.close(log)
	if want := []string{"backend", "gateway", "init", "claim"}; !slices.Equal(got, want) {
		t.Fatalf("closed %v, want %v, once each", got, want)
	}
}
