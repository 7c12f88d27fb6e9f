// Package budget bounds the memory that the requests in flight at the
// daemon's edges hold together: a request is counted at the most it may
// be while it is read, then at its size until its call ends. Beyond the
// budget a call is refused at once, never queued, so that no client, fast
// or slow, can make the daemon hold more.
package budget

import "sync"

// Budget is a number of bytes, and of calls, that calls take and give back.
type Budget struct {
	mu    sync.Mutex
	total int64
	left  int64
	calls int // calls that may still hold
}

// New returns a budget of bytes for at most calls calls at once.
func New(bytes int64, calls int) *Budget { return &Budget{total: bytes, left: bytes, calls: calls} }

// Take takes n bytes, or nothing and false when fewer are left.
func (b *Budget) Take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// Give gives n bytes back.
func (b *Budget) Give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left = min(b.left+n, b.total)
}

// Total is the budget's size.
func (b *Budget) Total() int64 { return b.total }

// Hold is what one call took. Its bytes can be lowered once the request is
// read, and are given back once, when the call ends.
type Hold struct {
	b    *Budget
	mu   sync.Mutex
	held int64
}

// Hold takes n bytes for one call, or returns nil when fewer are left or
// the calls are all taken.
func (b *Budget) Hold(n int64) *Hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left || b.calls == 0 {
		return nil
	}
	b.left -= n
	b.calls--
	return &Hold{b: b, held: n}
}

// Shrink lowers the hold to n bytes, giving the rest back.
func (h *Hold) Shrink(n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b != nil && n < h.held {
		h.b.Give(h.held - n)
		h.held = n
	}
}

// Release gives the hold back, once.
func (h *Hold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b == nil {
		return
	}
	h.b.mu.Lock()
	h.b.left = min(h.b.left+h.held, h.b.total)
	h.b.calls++
	h.b.mu.Unlock()
	h.b, h.held = nil, 0
}
