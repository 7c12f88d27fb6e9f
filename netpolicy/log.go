package netpolicy

import (
	"reflect"
	"slices"
	"sync"
	"time"
)

// Event is one decision of the gateway for a task: a DNS query, or a
// connection with what it moved.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is "dns" or "connect".
	Kind string `json:"kind"`
	// Name is the name asked for: the DNS question, the CONNECT target or
	// URL's host, the TLS server name or the HTTP Host, or the name of the
	// gateway's address the task dialled.
	Name string `json:"name,omitempty"`
	// Via says where Name came from: "dns", "connect", "http", "sni",
	// "host" or "address".
	Via  string `json:"via,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Addr is the address the gateway resolved or dialled.
	Addr    string `json:"addr,omitempty"`
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// BytesOut and BytesIn are what an allowed connection moved.
	BytesOut int64 `json:"bytes_out,omitempty"`
	BytesIn  int64 `json:"bytes_in,omitempty"`
	// Secrets name the operator's secrets the gateway added to the
	// connection's requests, Injections counts those requests, and
	// Masked the places a response carried one back, which the task got
	// masked. A secret's value is never recorded.
	Secrets    []string `json:"secrets,omitempty"`
	Injections int      `json:"injections,omitempty"`
	Masked     int      `json:"masked,omitempty"`
}

// Equal says whether e and o record the same.
func (e Event) Equal(o Event) bool { return reflect.DeepEqual(e, o) }

// Summary is what a task's network did, for its result and bundle.
type Summary struct {
	// Connections counts the connections the task attempted; Denied the
	// connections and DNS queries refused.
	Connections int   `json:"connections"`
	Denied      int   `json:"denied"`
	BytesOut    int64 `json:"bytes_out"`
	BytesIn     int64 `json:"bytes_in"`
	// Events are the decisions, in order, up to the log's cap; Dropped
	// counts those past it.
	Events  []Event `json:"events"`
	Dropped int     `json:"dropped,omitempty"`
}

// Binding is a task's policy in force at the gateway; End takes it away
// and returns what the task's network did.
type Binding interface {
	// Follow has fn called with each event of the task's log as it is
	// recorded or changes, until Follow is called again (nil for none).
	Follow(fn Follower)
	// Update puts p in force from now on, cutting the connections under
	// way that p does not allow.
	Update(p Policy) error
	End() Summary
}

// Follower is told of event i of a log as it now stands: once when the
// decision is made, and again when its connection ends (its bytes) or is
// cut (the reason). It is called in the log's order, under its lock, and
// must not call back into the log.
type Follower func(i int, e Event)

// MaxEvents bounds a task's log.
const MaxEvents = 2000

// Log records a task's decisions as they happen, from many connections at
// once; events past MaxEvents are counted, not kept.
type Log struct {
	mu     sync.Mutex
	s      Summary
	follow Follower
}

// Follow sets who is told of the log's events from now on (nil: no one).
func (l *Log) Follow(fn Follower) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.follow = fn
}

// told tells the follower of event i; l.mu is held.
func (l *Log) told(i int) {
	if l.follow != nil && i >= 0 && i < len(l.s.Events) {
		l.follow(i, l.s.Events[i])
	}
}

// Add records e and returns its index for Moved, or -1 when it is past
// the cap.
func (l *Log) Add(e Event) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.add(e)
}

func (l *Log) add(e Event) int {
	if e.Kind == "connect" {
		l.s.Connections++
	}
	if !e.Allowed {
		l.s.Denied++
	}
	if len(l.s.Events) >= MaxEvents {
		l.s.Dropped++
		return -1
	}
	l.s.Events = append(l.s.Events, e)
	i := len(l.s.Events) - 1
	l.told(i)
	return i
}

// Moved adds what a connection moved to its event i (-1 when it was
// dropped) and to the totals.
func (l *Log) Moved(i int, out, in int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.BytesOut += out
	l.s.BytesIn += in
	if i >= 0 && i < len(l.s.Events) {
		l.s.Events[i].BytesOut += out
		l.s.Events[i].BytesIn += in
		l.told(i)
	}
}

// Injected records that a request of connection i got the secrets names.
func (l *Log) Injected(i int, names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= 0 && i < len(l.s.Events) {
		e := &l.s.Events[i]
		e.Injections++
		for _, n := range names {
			if !slices.Contains(e.Secrets, n) {
				e.Secrets = append(e.Secrets, n)
			}
		}
		l.told(i)
	}
}

// Masked records that responses on connection i carried a secret back n
// more times, masked.
func (l *Log) Masked(i int, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= 0 && i < len(l.s.Events) && n > 0 {
		l.s.Events[i].Masked += n
		l.told(i)
	}
}

// Cut records why an allowed connection i was cut short.
func (l *Log) Cut(i int, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= 0 && i < len(l.s.Events) {
		l.s.Events[i].Reason = "cut: " + reason
		l.told(i)
	}
}

// Summary returns a copy of what was recorded so far.
func (l *Log) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.s
	s.Events = append([]Event(nil), l.s.Events...)
	return s
}

// Excerpt is what one follower of a log was told over a while, numbered
// from 0 and counted as a log of its own: a session's call's share of its
// session's log.
type Excerpt struct {
	log Log
	at  map[int]int // the followed log's index -> the excerpt's
}

// Take records event i of the followed log as it now stands and returns
// its index in the excerpt.
func (x *Excerpt) Take(i int, e Event) int {
	x.log.mu.Lock()
	defer x.log.mu.Unlock()
	j, seen := x.at[i]
	if !seen {
		if x.at == nil {
			x.at = map[int]int{}
		}
		j = x.log.add(e)
		x.at[i] = j
		x.log.s.BytesOut += e.BytesOut
		x.log.s.BytesIn += e.BytesIn
		return j
	}
	if j >= 0 {
		old := x.log.s.Events[j]
		x.log.s.BytesOut += e.BytesOut - old.BytesOut
		x.log.s.BytesIn += e.BytesIn - old.BytesIn
		x.log.s.Events[j] = e
	}
	return j
}

// Summary returns a copy of the excerpt.
func (x *Excerpt) Summary() Summary { return x.log.Summary() }
