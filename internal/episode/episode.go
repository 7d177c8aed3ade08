// Package episode turns a stream of failures and successes into episodes:
// a part that fails thousands of times a second (a full disk, an API
// server that is down) is reported when it begins failing and when it
// works again, and asked about in between, instead of once per failure.
package episode

import (
	"sync"
	"sync/atomic"
	"time"
)

// Tracker is the episode under way, if any. Its zero value has none. Ok
// is cheap while there is none: it is called on every success.
type Tracker struct {
	active atomic.Bool

	mu    sync.Mutex
	since time.Time // the episode's first failure
	n     int       // failures in it
	last  string    // why the last failed
}

// Fail records a failure at now and reports whether it began an episode.
func (t *Tracker) Fail(now time.Time, why string) (began bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	began = !t.active.Load()
	if began {
		t.since = now
		t.active.Store(true)
	}
	t.n++
	t.last = why
	return began
}

// Ok records a success. When it ends an episode it reports how many
// failures the episode held and when it began.
func (t *Tracker) Ok() (failures int, since time.Time, ended bool) {
	if !t.active.Load() {
		return 0, time.Time{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active.Load() {
		return 0, time.Time{}, false
	}
	failures, since = t.n, t.since
	t.active.Store(false)
	t.since, t.n, t.last = time.Time{}, 0, ""
	return failures, since, true
}

// UnderWay reports the episode under way: since when, how many failures
// so far and why the last failed; zero since when there is none.
func (t *Tracker) UnderWay() (since time.Time, failures int, last string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since, t.n, t.last
}
