// Package blind detects the service's own blindness, per cluster it reads:
// Flux layers exist and reconcile there, yet no event has come from that
// cluster's notification-controller for too long. Silence must never look
// like "no deploys": alerting built on Flux was found silently inert for
// weeks, and this product must not be.
package blind

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Store is the store: it enqueues the mail durably, and keeps the time of
// each cluster's last event across restarts, so that a silence spanning a
// restart is still one episode, with one mail. Cluster "" is the
// service's own.
type Store interface {
	Enqueue(mails []rollout.Mail, at time.Time) error
	LastEvent(cluster string) (time.Time, error)
	SetLastEvents(at map[string]time.Time) error
	PruneLastEvents(keep func(cluster string) bool) (int, error)
}

// Watchdog watches the pipe from the notification-controller of every
// cluster read: the service's own, and each registered one (Watch,
// Forget), wherever it is read. A cluster known by its events alone has
// no watchdog: without its layers, silence and "no deploys" look the same.
type Watchdog struct {
	after  time.Duration
	now    func() time.Time
	store  Store
	to     []string
	notify func()
	log    *slog.Logger
	local  string // the service's own cluster: events without metadata.cluster

	// pipes, replaced whole when one is added or removed (rarely):
	// Event, per event received, reads them without a lock.
	pipes atomic.Pointer[pipeSet]
	mu    sync.Mutex // serialises the replacements
	// checkMu serialises Check, Begin, and an event's immediate record.
	checkMu sync.Mutex

	silent, since *prometheus.Desc
}

// pipeSet is the pipes, by cluster name and in the order they are told
// (the service's own first, then by name).
type pipeSet struct {
	byName map[string]*pipe
	sorted []*pipe
}

// with returns the set with p in place of the pipe of its name, or
// without the pipe of name when p is nil.
func (ps *pipeSet) with(name string, p *pipe) *pipeSet {
	next := &pipeSet{byName: maps.Clone(ps.byName)}
	if p == nil {
		delete(next.byName, name)
	} else {
		next.byName[name] = p
	}
	// A registered cluster's key is its name; the service's own is "".
	next.sorted = slices.SortedFunc(maps.Values(next.byName), func(a, b *pipe) int { return cmp.Compare(a.key, b.key) })
	return next
}

// pipe is one cluster's.
type pipe struct {
	name string
	key  string // in the store and the mail's key: "" for the service's own
	// layers counts its layers, false when it cannot tell (its cluster
	// cannot be read): a silence then neither begins nor ends. Asked only
	// of a pipe silent for --blind-after.
	layers atomic.Pointer[func() (int, bool)]
	log    *slog.Logger // with the cluster
	stored time.Time    // the last event recorded in the store; under checkMu
	times  pipeTimes
	// warning is the last Check's: "" when not silent.
	warning atomic.Pointer[string]
}

// pipeTimes are what events and status changes move, without a lock.
type pipeTimes struct {
	started    atomic.Int64 // unix nanos of the start (or of Begin)
	lastEvent  atomic.Int64 // unix nanos of the last event received
	lastStatus atomic.Int64 // unix nanos of the last status change seen in the cluster
	// recordNext makes the next event be recorded at once rather than at
	// the next check. It is set when the last event recorded may name an
	// episode that was mailed (after a mail, and at start): else a crash
	// before the next check would let a later episode reuse that key, and
	// its mail be dropped as sent.
	recordNext atomic.Bool
	// since is the start of the current silent episode (unix nanos); 0
	// when not silent.
	since atomic.Int64
}

// New returns a watchdog of the service's own cluster, named local,
// whose reader sees layers; store and to (may be empty) receive the one
// mail per episode, notify wakes the mail dispatcher.
func New(after time.Duration, local string, layers func() int, store Store, to []string, notify func(), log *slog.Logger, now func() time.Time, reg prometheus.Registerer) (*Watchdog, error) {
	w := &Watchdog{after: after, now: now, store: store, to: to, notify: notify, log: log, local: local,
		silent: prometheus.NewDesc("fdn_flux_events_silent",
			"1 while the cluster's layers exist but no event has come from its notification-controller for --blind-after.", []string{"cluster"}, nil),
		since: prometheus.NewDesc("fdn_seconds_since_last_flux_event",
			"Seconds since the last event from the cluster's notification-controller (since start when none came).", []string{"cluster"}, nil),
	}
	w.pipes.Store(&pipeSet{byName: map[string]*pipe{}})
	if err := w.watch(local, "", func() (int, bool) { return layers(), true }); err != nil {
		return nil, err
	}
	if reg != nil {
		reg.MustRegister(metrics{w})
	}
	return w, nil
}

// Watch watches a registered cluster's pipe; layers counts its layers
// (its reader's, or a census where another replica reads it), false while
// it cannot tell: a silence neither begins nor ends meanwhile, and is not
// told (the cluster's fault is). A cluster already watched keeps its
// silence and takes the new layers.
func (w *Watchdog) Watch(cluster string, layers func() (int, bool)) error {
	if cluster == w.local || cluster == "" {
		return fmt.Errorf("cluster %q is the service's own", cluster)
	}
	return w.watch(cluster, cluster, layers)
}

func (w *Watchdog) watch(name, key string, layers func() (int, bool)) error {
	lp := &layers
	if p := w.pipes.Load().byName[name]; p != nil {
		p.layers.Store(lp)
		return nil
	}
	stored, err := w.store.LastEvent(key)
	if err != nil {
		return fmt.Errorf("read the time of cluster %s's last Flux event: %w", name, err)
	}
	p := &pipe{name: name, key: key, log: w.log.With("cluster", name), stored: stored}
	p.layers.Store(lp)
	p.times.started.Store(w.now().UnixNano())
	p.times.recordNext.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps := w.pipes.Load(); ps.byName[name] == nil {
		w.pipes.Store(ps.with(name, p))
	}
	return nil
}

// Forget stops watching a registered cluster (its Secret removed).
func (w *Watchdog) Forget(cluster string) {
	if cluster == w.local || cluster == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pipes.Store(w.pipes.Load().with(cluster, nil))
}

// Prune deletes the last events kept of the clusters registered says are
// no longer registered, those whose Secrets went while the service ran or
// not, so that the store holds the clusters registered, not all those
// ever registered. It must be asked only once registered knows every
// Secret: until then a cluster it does not know yet would lose its last
// event, and a silence spanning the restart would be mailed again.
func (w *Watchdog) Prune(registered func(cluster string) bool) {
	w.checkMu.Lock() // not while an event's time is recorded
	defer w.checkMu.Unlock()
	n, err := w.store.PruneLastEvents(func(cluster string) bool {
		return registered(cluster) || w.pipes.Load().byName[cluster] != nil
	})
	switch {
	case err != nil:
		w.log.Error("delete the last Flux events of clusters no longer registered", "err", err)
	case n > 0:
		w.log.Info("deleted the last Flux events of clusters no longer registered", "clusters", n)
	}
}

// sorted are the pipes, the service's own first, then by name.
func (w *Watchdog) sorted() []*pipe { return w.pipes.Load().sorted }

// pipe is cluster's, nil when it is not watched; "" is the service's own.
func (w *Watchdog) pipe(cluster string) *pipe {
	if cluster == "" {
		cluster = w.local
	}
	return w.pipes.Load().byName[cluster]
}

// Begin starts watching afresh, as a restart does: a replica that begins
// to lead has seen none of the events the leader before it took, and the
// silence counts from now (or an event since), the episode named by the
// last event the store kept.
func (w *Watchdog) Begin() {
	w.checkMu.Lock()
	defer w.checkMu.Unlock()
	now := w.now()
	for _, p := range w.sorted() {
		stored, err := w.store.LastEvent(p.key)
		if err != nil {
			p.log.Error("read the time of the last Flux event", "err", err)
		} else {
			p.stored = stored
		}
		p.times.since.Store(0)
		p.warning.Store(nil)
		p.times.started.Store(now.UnixNano())
		p.times.lastEvent.Store(0)
		p.times.recordNext.Store(true)
	}
}

// Event records an event received from cluster's notification-controller
// ("" the service's own). A cluster not watched is ignored.
func (w *Watchdog) Event(cluster string) {
	p := w.pipe(cluster)
	if p == nil {
		return
	}
	now := w.now()
	p.times.lastEvent.Store(now.UnixNano())
	if p.times.recordNext.CompareAndSwap(true, false) && !w.recordNow(p, now) {
		p.times.recordNext.Store(true)
	}
}

// recordNow writes p's last event to the store at once, unless it is
// there already, and reports whether it is there.
func (w *Watchdog) recordNow(p *pipe, at time.Time) bool {
	w.checkMu.Lock()
	defer w.checkMu.Unlock()
	if !at.After(p.stored) {
		return true
	}
	if err := w.store.SetLastEvents(map[string]time.Time{p.key: at}); err != nil {
		p.log.Error("record the time of the last Flux event", "err", err)
		return false
	}
	p.stored = at
	return true
}

// StatusMoved records a status change of a layer in cluster.
func (w *Watchdog) StatusMoved(cluster string) {
	if p := w.pipe(cluster); p != nil {
		p.times.lastStatus.Store(w.now().UnixNano())
	}
}

// last is when p's silence counts from: its last event, or the start of
// this process (or its watch) when none came since. A restart thus waits
// --blind-after for notification-controller before it says anything.
func (p *pipe) last() time.Time {
	if n := p.times.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Unix(0, p.times.started.Load())
}

// lastKnown is the last event ever received, across restarts: it names the
// episode (the mail's key) and is what the warning reports. Under checkMu.
func (p *pipe) lastKnown() time.Time {
	if n := p.times.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	if !p.stored.IsZero() {
		return p.stored
	}
	return time.Unix(0, p.times.started.Load())
}

// layerCount is how many layers p's cluster has; false while that cannot
// be told.
func (p *pipe) layerCount() (int, bool) { return (*p.layers.Load())() }

// describe describes p's silence; under checkMu.
func (p *pipe) describe(layers int) string {
	msg := fmt.Sprintf("cluster %s: no event from notification-controller since %s while %d layers exist", p.name, p.lastKnown().UTC().Format(time.RFC3339), layers)
	if n := p.times.lastStatus.Load(); n != 0 && time.Unix(0, n).After(p.lastKnown()) {
		msg += fmt.Sprintf(", and their status last moved at %s", time.Unix(0, n).UTC().Format(time.RFC3339))
	}
	return msg + ": check the Provider, the Alert and this service's address; until then its verdicts rely on cluster state alone"
}

// Warnings describe each silent cluster's silence, the service's own
// first; none when every pipe is healthy. They are those of the last
// Check.
func (w *Watchdog) Warnings() []string {
	var out []string
	for _, p := range w.sorted() {
		if s := p.warning.Load(); s != nil && *s != "" {
			out = append(out, *s)
		}
	}
	return out
}

// WarningOf is cluster's warning of the last Check ("" the service's
// own): "" when its pipe is healthy or not watched.
func (w *Watchdog) WarningOf(cluster string) string {
	if p := w.pipe(cluster); p != nil {
		if s := p.warning.Load(); s != nil {
			return *s
		}
	}
	return ""
}

// Check evaluates every pipe once: it starts an episode (one mail) when a
// silence has lasted --blind-after, and ends it when an event comes. It
// records the last event of every cluster whose moved, in one write.
func (w *Watchdog) Check() {
	now := w.now()
	pipes := w.sorted()
	// The layers of the pipes silent for --blind-after are counted first,
	// outside the lock: a census asks a cluster's API server, and an event
	// recorded at once (recordNow) must not wait for it. A pipe's silence
	// can only end meanwhile, never begin.
	type count struct {
		layers    int
		quiet, ok bool
	}
	counts := make([]count, len(pipes))
	for i, p := range pipes {
		if now.Sub(p.last()) >= w.after {
			counts[i].quiet = true
			counts[i].layers, counts[i].ok = p.layerCount()
		}
	}
	w.checkMu.Lock()
	defer w.checkMu.Unlock()
	moved := map[string]time.Time{}
	for _, p := range pipes {
		if n := p.times.lastEvent.Load(); n != 0 && time.Unix(0, n).After(p.stored) {
			moved[p.key] = time.Unix(0, n)
		}
	}
	if err := w.store.SetLastEvents(moved); err != nil {
		w.log.Error("record the time of the last Flux events", "err", err, "clusters", len(moved))
	} else {
		for _, p := range pipes {
			if at, ok := moved[p.key]; ok {
				p.stored = at
			}
		}
	}
	var (
		mails  []rollout.Mail
		mailed []*pipe
	)
	for i, p := range pipes {
		c := counts[i]
		if c.quiet = c.quiet && now.Sub(p.last()) >= w.after; c.quiet && !c.ok {
			p.warning.Store(nil) // the cluster's own fault is told instead
			continue
		}
		silent, layers := c.quiet && c.layers > 0, c.layers
		was := p.times.since.Load() != 0
		switch {
		case silent && !was:
			p.times.since.Store(now.UnixNano())
			p.log.Warn("no events from Flux", "since", p.lastKnown().UTC().Format(time.RFC3339), "layers", layers)
			if m := w.mails(p, layers); len(m) > 0 {
				mails, mailed = append(mails, m...), append(mailed, p)
			}
		case !silent && was:
			p.times.since.Store(0)
			p.log.Info("events from Flux again")
		}
		msg := ""
		if silent {
			msg = p.describe(layers)
		}
		p.warning.Store(&msg)
	}
	if len(mails) == 0 {
		return
	}
	if err := w.store.Enqueue(mails, now); err != nil {
		w.log.Error("enqueue the no-events mails", "err", err)
		return
	}
	for _, p := range mailed {
		p.times.recordNext.Store(true)
	}
	if w.notify != nil {
		w.notify()
	}
}

// mails are p's "no events from Flux" mails for the episode that begins,
// one per recipient; the key (the cluster and its last event before it,
// kept in the store) keeps it to one across restarts within the same
// silence.
func (w *Watchdog) mails(p *pipe, layers int) []rollout.Mail {
	began := p.lastKnown().UTC().Truncate(time.Second)
	var mails []rollout.Mail
	for _, to := range w.to {
		mails = append(mails, rollout.Mail{
			Key:  rollout.MailKey{Kind: rollout.MailBlind, Episode: began, Cluster: p.key, To: to}.String(),
			Kind: rollout.MailBlind, To: to,
			Blind: &rollout.Blind{Since: began, Layers: layers, Warning: p.describe(layers)},
		})
	}
	return mails
}

// Run checks the pipes until ctx ends, often enough to notice a silence
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

// metrics are each watched cluster's pipe, at every scrape.
type metrics struct{ w *Watchdog }

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.w.silent
	ch <- m.w.since
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	now := m.w.now()
	for _, p := range m.w.sorted() {
		silent := 0.0
		if p.times.since.Load() != 0 {
			silent = 1
		}
		ch <- prometheus.MustNewConstMetric(m.w.silent, prometheus.GaugeValue, silent, p.name)
		ch <- prometheus.MustNewConstMetric(m.w.since, prometheus.GaugeValue, now.Sub(p.last()).Seconds(), p.name)
	}
}
