// Package limits defines the resource limits of one task, their defaults, and
// the operator's policy that turns a request's limits into effective ones.
//
// A zero field in a request means "the default", never "unlimited": every
// task runs with every limit set.
package limits

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/go-units"
)

// Limits bounds one task.
type Limits struct {
	// MemoryBytes is the memory limit; swap is not allowed on top of it.
	MemoryBytes int64
	// CPUMillis is CPU time in thousandths of a core: 1000 is one core.
	CPUMillis int64
	// Pids is the maximum number of processes and threads.
	Pids int64
	// Timeout is the wall-clock limit; past it the whole container is killed.
	Timeout time.Duration
	// StdoutBytes is how much stdout the caller receives.
	StdoutBytes int64
	// StderrBytes is how much stderr the caller receives.
	StderrBytes int64
	// DiskBytes is the size of the writable /workspace and, separately, /tmp.
	DiskBytes int64
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// Defaults are the limits of a task that asks for nothing.
func Defaults() Limits {
	return Limits{
		MemoryBytes: 512 * mib,
		CPUMillis:   1000,
		Pids:        128,
		Timeout:     30 * time.Second,
		StdoutBytes: 1 * mib,
		StderrBytes: 1 * mib,
		DiskBytes:   256 * mib,
	}
}

// Maximums are the highest limits a request may ask for unless the operator
// says otherwise.
func Maximums() Limits {
	return Limits{
		MemoryBytes: 4 * gib,
		CPUMillis:   4000,
		Pids:        1024,
		Timeout:     10 * time.Minute,
		StdoutBytes: 16 * mib,
		StderrBytes: 16 * mib,
		DiskBytes:   2 * gib,
	}
}

// Minimums are the lowest limits with which a container still starts and a
// program can say something.
func Minimums() Limits {
	return Limits{
		MemoryBytes: 16 * mib,
		CPUMillis:   10,
		Pids:        8,
		Timeout:     100 * time.Millisecond,
		StdoutBytes: 1 * kib,
		StderrBytes: 1 * kib,
		DiskBytes:   1 * mib,
	}
}

// field is one limit in the unit and under the name the API uses.
type field struct {
	name string
	get  func(Limits) int64
	set  func(*Limits, int64)
}

// show is v with, for a size or a time, the same in the units a person
// types (256MiB, 30s): the API's unit alone hides a mistake of 1024.
func (f field) show(v int64) string {
	switch {
	case strings.HasSuffix(f.name, "_bytes") && v >= 1024:
		return fmt.Sprintf("%d (%s)", v, units.BytesSize(float64(v)))
	case f.name == "timeout_ms" && v >= 1000:
		return fmt.Sprintf("%d (%s)", v, time.Duration(v)*time.Millisecond)
	}
	return strconv.FormatInt(v, 10)
}

var fields = []field{
	{"memory_bytes", func(l Limits) int64 { return l.MemoryBytes }, func(l *Limits, v int64) { l.MemoryBytes = v }},
	{"cpu_millis", func(l Limits) int64 { return l.CPUMillis }, func(l *Limits, v int64) { l.CPUMillis = v }},
	{"pids", func(l Limits) int64 { return l.Pids }, func(l *Limits, v int64) { l.Pids = v }},
	{"timeout_ms", func(l Limits) int64 { return l.Timeout.Milliseconds() }, func(l *Limits, v int64) { l.Timeout = time.Duration(v) * time.Millisecond }},
	{"stdout_bytes", func(l Limits) int64 { return l.StdoutBytes }, func(l *Limits, v int64) { l.StdoutBytes = v }},
	{"stderr_bytes", func(l Limits) int64 { return l.StderrBytes }, func(l *Limits, v int64) { l.StderrBytes = v }},
	{"disk_bytes", func(l Limits) int64 { return l.DiskBytes }, func(l *Limits, v int64) { l.DiskBytes = v }},
}

// Policy turns requested limits into effective ones.
type Policy struct {
	// Default fills every field a request leaves at zero.
	Default Limits
	// Max is the highest value a request may ask for. A request above it is
	// refused rather than clamped, so that a program never runs with less
	// than its caller believes it has.
	Max Limits
}

// DefaultPolicy is the policy of a daemon started without limit flags.
func DefaultPolicy() Policy {
	return Policy{Default: Defaults(), Max: Maximums()}
}

// Validate rejects a policy whose defaults lie outside [Minimums, Max].
func (p Policy) Validate() error {
	lowest := Minimums()
	for _, f := range fields {
		d, m, lo := f.get(p.Default), f.get(p.Max), f.get(lowest)
		if m < lo {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("maximum %s %s is below the minimum %s", f.name, f.show(m), f.show(lo)))
		}
		if d < lo || d > m {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("default %s %s is outside [%s, %s]", f.name, f.show(d), f.show(lo), f.show(m)))
		}
	}
	return nil
}

// Within is p with its maxima lowered to the non-zero fields of max, and
// its defaults to the new maxima; a maximum below the minimum is refused.
func (p Policy) Within(max Limits) (Policy, error) {
	lowest := Minimums()
	for _, f := range fields {
		v := f.get(max)
		switch {
		case v == 0:
			continue
		case v < f.get(lowest):
			return Policy{}, invalid(f.name, fmt.Sprintf("%s is below the minimum %s", f.show(v), f.show(f.get(lowest))))
		case v < f.get(p.Max):
			f.set(&p.Max, v)
			f.set(&p.Default, min(f.get(p.Default), v))
		}
	}
	return p, nil
}

// Resolve returns the effective limits of a request: zero fields take the
// default; a negative field, or one outside [Minimums, Max], is refused with
// an invalid-argument error that names it.
func (p Policy) Resolve(req Limits) (Limits, error) {
	eff := req
	lowest := Minimums()
	for _, f := range fields {
		switch v := f.get(req); {
		case v == 0:
			f.set(&eff, f.get(p.Default))
		case v < 0:
			return Limits{}, invalid(f.name, fmt.Sprintf("%d is negative; 0 means the default", v))
		case v < f.get(lowest):
			return Limits{}, invalid(f.name, fmt.Sprintf("%s is below the minimum %s", f.show(v), f.show(f.get(lowest))))
		case v > f.get(p.Max):
			return Limits{}, invalid(f.name, fmt.Sprintf("%s is above the operator's maximum %s", f.show(v), f.show(f.get(p.Max))))
		}
	}
	return eff, nil
}

func invalid(name, reason string) error {
	return errdefs.ErrInvalidArgument.WithMessage("limits." + name + ": " + reason)
}

// Over is l with its zero fields taken from base: a case's own limits
// over its submission's.
func (l Limits) Over(base Limits) Limits {
	for _, f := range fields {
		if f.get(l) == 0 {
			f.set(&l, f.get(base))
		}
	}
	return l
}

// jsonLimits is Limits as the API and bundles spell them.
type jsonLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	CPUMillis   int64 `json:"cpu_millis"`
	Pids        int64 `json:"pids"`
	TimeoutMs   int64 `json:"timeout_ms"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	DiskBytes   int64 `json:"disk_bytes"`
}

// MarshalJSON spells the limits as the API does, the timeout in
// milliseconds.
func (l Limits) MarshalJSON() ([]byte, error) {
	return json.Marshal(jsonLimits{l.MemoryBytes, l.CPUMillis, l.Pids, l.Timeout.Milliseconds(), l.StdoutBytes, l.StderrBytes, l.DiskBytes})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var j jsonLimits
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	timeout, err := Millis(j.TimeoutMs)
	if err != nil {
		return invalid("timeout_ms", err.Error())
	}
	*l = Limits{j.MemoryBytes, j.CPUMillis, j.Pids, timeout, j.StdoutBytes, j.StderrBytes, j.DiskBytes}
	return nil
}

// Millis is ms milliseconds as a Duration, refused when it does not fit
// rather than wrapped around.
func Millis(ms int64) (time.Duration, error) {
	const most = math.MaxInt64 / int64(time.Millisecond)
	if ms > most || ms < -most {
		return 0, fmt.Errorf("%d ms is out of range", ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
