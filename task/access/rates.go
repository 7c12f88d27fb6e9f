package access

import (
	"sync"
	"time"
)

// Rates holds a token bucket per tenant with a runs-a-minute quota: it
// fills at that rate up to a minute's worth, so a tenant may start a
// minute's runs at once after a quiet minute, and no more on average.
type Rates struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// Take takes a token of tenant's bucket for a quota of perMinute (0 for
// none) at now, or says how long until there is one.
func (r *Rates) Take(tenant string, perMinute int, now time.Time) (wait time.Duration, ok bool) {
	if perMinute <= 0 {
		return 0, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*bucket{}
	}
	capacity, perSecond := float64(perMinute), float64(perMinute)/60
	b, seen := r.buckets[tenant]
	if !seen {
		b = &bucket{tokens: capacity, at: now}
		r.buckets[tenant] = b
	}
	b.tokens = min(capacity, b.tokens+now.Sub(b.at).Seconds()*perSecond)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	wait = time.Duration((1 - b.tokens) / perSecond * float64(time.Second))
	return max(100*time.Millisecond, wait.Round(100*time.Millisecond)), false
}
