// Package blind detects the service's own blindness: Flux layers exist
// and reconcile, yet no event has come from notification-controller for
// too long. Silence must never look like "no deploys": alerting built on
// Flux was found silently inert for weeks, and this product must not be.
package blind

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Store is the store: it enqueues the mail durably, and keeps the time of
// the last event across restarts, so that a silence spanning a restart is
// still one episode, with one mail.
type Store interface {
	Enqueue(mails []rollout.Mail, at time.Time) error
	LastEvent() (time.Time, error)
	SetLastEvent(at time.Time) error
}

// Watchdog watches the pipe from notification-controller.
type Watchdog struct {
	after  time.Duration
	now    func() time.Time
	layers func() int // layers the cluster reader sees
	store  Store
	to     []string
	notify func()
	log    *slog.Logger

	started    atomic.Int64 // unix nanos of the start (or of Begin)
	lastEvent  atomic.Int64 // unix nanos of the last event received
	lastStatus atomic.Int64 // unix nanos of the last status change seen in the cluster
	// recordNext makes the next event be recorded at once rather than at
	// the next check. It is set when the last event recorded may name an
	// episode that was mailed (after a mail, and at start): else a crash
	// before the next check would let a later episode reuse that key, and
	// its mail be dropped as sent.
	recordNext atomic.Bool

	storedMu sync.Mutex
	stored   time.Time // the last event recorded in the store

	mu    sync.Mutex
	since time.Time // start of the current silent episode; zero when not silent

	silent prometheus.Gauge
}

// New returns a watchdog; layers reports how many Kustomizations the
// cluster reader sees, store and to (may be empty) receive the one mail
// per episode, notify wakes the mail dispatcher.
func New(after time.Duration, layers func() int, store Store, to []string, notify func(), log *slog.Logger, now func() time.Time, reg prometheus.Registerer) (*Watchdog, error) {
	stored, err := store.LastEvent()
	if err != nil {
		return nil, fmt.Errorf("read the time of the last Flux event: %w", err)
	}
	w := &Watchdog{after: after, now: now, layers: layers, store: store, to: to, notify: notify, log: log, stored: stored}
	w.started.Store(now().UnixNano())
	w.recordNext.Store(true)
	w.silent = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fdn_flux_events_silent",
		Help: "1 while layers exist but no event has come from notification-controller for --blind-after.",
	})
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_seconds_since_last_flux_event",
		Help: "Seconds since the last event from notification-controller (since start when none came).",
	}, func() float64 { return w.now().Sub(w.last()).Seconds() })
	if reg != nil {
		reg.MustRegister(w.silent, since)
	}
	return w, nil
}

// Begin starts watching afresh, as a restart does: a replica that begins
// to lead has seen none of the events the leader before it took, and the
// silence counts from now (or an event since), the episode named by the
// last event the store kept.
func (w *Watchdog) Begin() {
	stored, err := w.store.LastEvent()
	if err != nil {
		w.log.Error("read the time of the last Flux event", "err", err)
	}
	w.storedMu.Lock()
	if err == nil {
		w.stored = stored
	}
	w.storedMu.Unlock()
	w.mu.Lock()
	w.since = time.Time{}
	w.mu.Unlock()
	w.started.Store(w.now().UnixNano())
	w.lastEvent.Store(0)
	w.recordNext.Store(true)
}

// Event records an event received from notification-controller.
func (w *Watchdog) Event() {
	now := w.now()
	w.lastEvent.Store(now.UnixNano())
	if w.recordNext.CompareAndSwap(true, false) && !w.record(now) {
		w.recordNext.Store(true)
	}
}

// record writes the time of the last event to the store, unless it is
// there already, and reports whether it is there.
func (w *Watchdog) record(at time.Time) bool {
	w.storedMu.Lock()
	defer w.storedMu.Unlock()
	if !at.After(w.stored) {
		return true
	}
	if err := w.store.SetLastEvent(at); err != nil {
		w.log.Error("record the time of the last Flux event", "err", err)
		return false
	}
	w.stored = at
	return true
}

// StatusMoved records a status change of a layer in the cluster.
func (w *Watchdog) StatusMoved() { w.lastStatus.Store(w.now().UnixNano()) }

// last is when the silence counts from: the last event, or the start of
// this process when none came since. A restart thus waits --blind-after
// for notification-controller before it says anything.
func (w *Watchdog) last() time.Time {
	if n := w.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Unix(0, w.started.Load())
}

// lastKnown is the last event ever received, across restarts: it names the
// episode (the mail's key) and is what the warning reports.
func (w *Watchdog) lastKnown() time.Time {
	if n := w.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	w.storedMu.Lock()
	defer w.storedMu.Unlock()
	if !w.stored.IsZero() {
		return w.stored
	}
	return time.Unix(0, w.started.Load())
}

// Warning describes the current silence, or "" when the pipe is healthy.
func (w *Watchdog) Warning() string {
	w.mu.Lock()
	since := w.since
	w.mu.Unlock()
	if since.IsZero() {
		return ""
	}
	msg := fmt.Sprintf("no event from notification-controller since %s while %d layers exist", w.lastKnown().UTC().Format(time.RFC3339), w.layers())
	if n := w.lastStatus.Load(); n != 0 && time.Unix(0, n).After(w.lastKnown()) {
		msg += fmt.Sprintf(", and their status last moved at %s", time.Unix(0, n).UTC().Format(time.RFC3339))
	}
	return msg + ": check the Provider, the Alert and this service's address; until then verdicts rely on cluster state alone"
}

// Check evaluates the pipe once: it starts an episode (one mail) when the
// silence has lasted --blind-after, and ends it when an event comes. It
// records the last event in the store when it moved.
func (w *Watchdog) Check() {
	now := w.now()
	if n := w.lastEvent.Load(); n != 0 {
		w.record(time.Unix(0, n))
	}
	silent := w.layers() > 0 && now.Sub(w.last()) >= w.after
	w.mu.Lock()
	started := silent && w.since.IsZero()
	ended := !silent && !w.since.IsZero()
	switch {
	case started:
		w.since = now
	case ended:
		w.since = time.Time{}
	}
	w.mu.Unlock()
	if silent {
		w.silent.Set(1)
	} else {
		w.silent.Set(0)
	}
	switch {
	case started:
		w.log.Warn("no events from Flux", "since", w.lastKnown().UTC().Format(time.RFC3339), "layers", w.layers())
		w.mail(now)
	case ended:
		w.log.Info("events from Flux again")
	}
}

// mail enqueues one "no events from Flux" mail per recipient for the
// episode; the key (the last event before it, kept in the store) keeps it
// to one across restarts within the same silence.
func (w *Watchdog) mail(now time.Time) {
	if len(w.to) == 0 {
		return
	}
	began := w.lastKnown().UTC().Truncate(time.Second)
	var mails []rollout.Mail
	for _, to := range w.to {
		mails = append(mails, rollout.Mail{
			Key:  rollout.MailKey{Kind: rollout.MailBlind, Episode: began, To: to}.String(),
			Kind: rollout.MailBlind, To: to,
			Blind: &rollout.Blind{Since: began, Layers: w.layers(), Warning: w.Warning()},
		})
	}
	if err := w.store.Enqueue(mails, now); err != nil {
		w.log.Error("enqueue the no-events mail", "err", err)
		return
	}
	w.recordNext.Store(true)
	if w.notify != nil {
		w.notify()
	}
}

// Run checks the pipe until ctx ends, often enough to notice a silence
// within a tenth of --blind-after.
func (w *Watchdog) Run(ctx context.Context) {
	t := time.NewTicker(max(w.after/10, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}
