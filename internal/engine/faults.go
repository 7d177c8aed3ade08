package engine

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// storeHealth turns failed commits into episodes. A full disk fails every
// batch, thousands a second: the log says so once when an episode begins
// and once when commits succeed again, with the count; metrics and
// readiness read the rest at any time.
type storeHealth struct {
	failures atomic.Int64 // failed commits since start
	last     atomic.Int64 // unix nanos of the last failure; 0 before any
	since    atomic.Int64 // unix nanos the current episode began; 0 when commits succeed
	lastErr  atomic.Pointer[string]

	episode int64 // failures in the current episode; leader only
}

// failed records a failed commit at now; the first of an episode is logged.
func (h *storeHealth) failed(err error, now time.Time, log *slog.Logger) {
	h.failures.Add(1)
	h.last.Store(now.UnixNano())
	msg := err.Error()
	h.lastErr.Store(&msg)
	h.episode++
	if h.since.Load() == 0 {
		h.since.Store(now.UnixNano())
		log.Error("store commits failing: events are answered 503 (notification-controller retries them) until a commit succeeds", "err", err)
	}
}

// succeeded ends an episode, if one is under way; every commit calls it,
// so it reads the clock only then.
func (h *storeHealth) succeeded(now func() time.Time, log *slog.Logger) {
	since := h.since.Load()
	if since == 0 {
		return
	}
	log.Warn("store commits succeed again", "failed_commits", h.episode, "for", now().Sub(time.Unix(0, since)).Round(time.Millisecond).String())
	h.episode = 0
	h.since.Store(0)
}

// warning describes the episode under way, or is "".
func (h *storeHealth) warning() string {
	since := h.since.Load()
	if since == 0 {
		return ""
	}
	msg := ""
	if p := h.lastErr.Load(); p != nil {
		msg = *p
	}
	return fmt.Sprintf("storing fails since %s (events are answered 503 and retried by Flux): %s",
		time.Unix(0, since).UTC().Format(time.RFC3339), msg)
}

// StoreWarning says, while commits fail, since when and why; "" otherwise.
func (e *Engine) StoreWarning() string { return e.health.warning() }

// CommitFailures is the number of failed commits since start and the time
// of the last (zero before any).
func (e *Engine) CommitFailures() (int64, time.Time) {
	var at time.Time
	if n := e.health.last.Load(); n != 0 {
		at = time.Unix(0, n)
	}
	return e.health.failures.Load(), at
}
