// Package silence detects the service's own blindness: Flux layers exist
// and reconcile, yet no event has come from notification-controller for
// too long. Silence must never look like "no deploys": alerting built on
// Flux was found silently inert for weeks, and this product must not be.
package silence

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

// Outbox enqueues a mail durably: the store.
type Outbox interface {
	Enqueue(mails []rollout.Mail, at time.Time) error
}

// Watchdog watches the pipe from notification-controller.
type Watchdog struct {
	after  time.Duration
	now    func() time.Time
	layers func() int // layers the cluster reader sees
	outbox Outbox
	to     []string
	notify func()
	log    *slog.Logger

	started    time.Time
	lastEvent  atomic.Int64 // unix nanos of the last event received
	lastStatus atomic.Int64 // unix nanos of the last status change seen in the cluster

	mu    sync.Mutex
	since time.Time // start of the current silent episode; zero when not silent

	silent prometheus.Gauge
}

// New returns a watchdog; layers reports how many Kustomizations the
// cluster reader sees, outbox and to (may be empty) receive the one mail
// per episode, notify wakes the mail dispatcher.
func New(after time.Duration, layers func() int, outbox Outbox, to []string, notify func(), log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *Watchdog {
	w := &Watchdog{after: after, now: now, layers: layers, outbox: outbox, to: to, notify: notify, log: log, started: now()}
	w.silent = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fdn_flux_events_silent",
		Help: "1 while layers exist but no event has come from notification-controller for --silence-after.",
	})
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_seconds_since_last_flux_event",
		Help: "Seconds since the last event from notification-controller (since start when none came).",
	}, func() float64 { return w.now().Sub(w.last()).Seconds() })
	if reg != nil {
		reg.MustRegister(w.silent, since)
	}
	return w
}

// Event records an event received from notification-controller.
func (w *Watchdog) Event() { w.lastEvent.Store(w.now().UnixNano()) }

// StatusMoved records a status change of a layer in the cluster.
func (w *Watchdog) StatusMoved() { w.lastStatus.Store(w.now().UnixNano()) }

func (w *Watchdog) last() time.Time {
	if n := w.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return w.started
}

// Warning describes the current silence, or "" when the pipe is healthy.
func (w *Watchdog) Warning() string {
	w.mu.Lock()
	since := w.since
	w.mu.Unlock()
	if since.IsZero() {
		return ""
	}
	msg := fmt.Sprintf("no event from notification-controller since %s while %d layers exist", w.last().UTC().Format(time.RFC3339), w.layers())
	if n := w.lastStatus.Load(); n != 0 && time.Unix(0, n).After(w.last()) {
		msg += fmt.Sprintf(", and their status last moved at %s", time.Unix(0, n).UTC().Format(time.RFC3339))
	}
	return msg + ": check the Provider, the Alert and this service's address; until then verdicts rely on cluster state alone"
}

// Check evaluates the pipe once: it starts an episode (one mail) when the
// silence has lasted --silence-after, and ends it when an event comes.
func (w *Watchdog) Check() {
	now := w.now()
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
		w.log.Warn("no events from Flux", "since", w.last().UTC().Format(time.RFC3339), "layers", w.layers())
		w.mail(now)
	case ended:
		w.log.Info("events from Flux again")
	}
}

// mail enqueues one "no events from Flux" mail per recipient for the
// episode; the key (the time the silence began) keeps it to one across
// restarts within the same silence.
func (w *Watchdog) mail(now time.Time) {
	if len(w.to) == 0 {
		return
	}
	began := w.last().UTC().Truncate(time.Second)
	var mails []rollout.Mail
	for _, to := range w.to {
		mails = append(mails, rollout.Mail{
			Key:  "\x00silence\x00" + began.Format(time.RFC3339) + "\x00" + to,
			Kind: rollout.MailSilence, To: to,
			Silence: &rollout.Silence{Since: began, Layers: w.layers(), Warning: w.Warning()},
		})
	}
	if err := w.outbox.Enqueue(mails, now); err != nil {
		w.log.Error("enqueue the no-events mail", "err", err)
		return
	}
	if w.notify != nil {
		w.notify()
	}
}

// Run checks the pipe until ctx ends, often enough to notice a silence
// within a tenth of --silence-after.
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
