// Package outbox is the durable outbox of what is due to leave the
// service (mails, and the verdicts each channel shows: a forge, Slack,
// Teams, a webhook): its contract (records.go: one delivery state for
// all, the records and what differs between a mail and a publication,
// which publications a channel takes, what the store implements); the one
// dispatcher of every outbox over a deliverer each (dispatch.go:
// coalesced, retried, rate limited, dead-lettered, counted); its loop,
// which delivers at start, when woken and when the earliest retry is due;
// the backoff of transient failures; and a warning logged once per change
// of its text.
package outbox

import (
	"context"
	"log/slog"
	"time"
)

// Waker tells a dispatcher that its outbox has something new.
type Waker chan struct{}

// NewWaker makes a Waker.
func NewWaker() Waker { return make(Waker, 1) }

// Wake never blocks: a wake-up already pending covers this one.
func (w Waker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Run calls flush until ctx ends: at once (what a previous run left), when
// woken, and when the earliest retry flush returned is due (zero: none,
// then an hour at most).
func Run(ctx context.Context, w Waker, now func() time.Time, flush func(context.Context) time.Time) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w:
		case <-timer.C:
		}
		if ctx.Err() != nil {
			return nil // the timer and the end were both ready
		}
		next := flush(ctx)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(now()), 0)
		}
		timer.Reset(wait)
	}
}

// Backoff is the wait before the next attempt after attempts transient
// failures: base, doubling, never more than most.
func Backoff(attempts int, base, most time.Duration) time.Duration {
	b := base
	for i := 1; i < attempts && b < most; i++ {
		b *= 2
	}
	return min(b, most)
}

// Warner logs a repeating failure once per change of its text.
type Warner struct {
	Log  *slog.Logger
	last string
}

// Warn logs msg and err unless it was the last thing said.
func (w *Warner) Warn(msg string, err error) {
	if text := msg + ": " + err.Error(); text != w.last {
		w.last = text
		w.Log.Warn(msg, "err", err)
	}
}
