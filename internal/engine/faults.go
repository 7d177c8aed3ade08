package engine

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/episode"
)

// storeHealth turns failed commits into episodes. A full disk fails every
// batch, thousands a second: the log says so once when an episode begins
// and once when commits succeed again, with the count; metrics and
// readiness read the rest at any time.
type storeHealth struct {
	failures atomic.Int64 // failed commits since start
	last     atomic.Int64 // unix nanos of the last failure; 0 before any
	episode  episode.Tracker
}

// failed records a failed commit at now; the first of an episode is logged.
func (h *storeHealth) failed(err error, now time.Time, log *slog.Logger) {
	h.failures.Add(1)
	h.last.Store(now.UnixNano())
	if h.episode.Fail(now, err.Error()) {
		log.Error("store commits failing: events are answered 503 (notification-controller retries them) until a commit succeeds", "err", err)
	}
}

// succeeded ends an episode, if one is under way; every commit calls it,
// so it reads the clock only then.
func (h *storeHealth) succeeded(now func() time.Time, log *slog.Logger) {
	if n, since, ended := h.episode.Ok(); ended {
		log.Warn("store commits succeed again", "failed_commits", n, "for", now().Sub(since).Round(time.Millisecond).String())
	}
}

// warning describes the episode under way, or is "".
func (h *storeHealth) warning() string {
	since, _, why := h.episode.UnderWay()
	if since.IsZero() {
		return ""
	}
	return fmt.Sprintf("storing fails since %s (events are answered 503 and retried by Flux): %s",
		since.UTC().Format(time.RFC3339), why)
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
