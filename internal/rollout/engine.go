package rollout

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"
)

// Config is the engine's part of the service configuration.
type Config struct {
	// Layers are expected in every rollout of every cluster (--layers).
	Layers []Emitter
	// StuckAfter is how long a rollout may take from its first evidence.
	StuckAfter time.Duration
	// Retention is how long a rollout is kept after its last evidence.
	Retention time.Duration
	// DefaultCluster names the cluster of events without metadata.cluster.
	DefaultCluster string
}

// Store keeps evidence durably. Commit is one transaction: all or nothing.
type Store interface {
	Load(fn func(EvidenceKey, *Evidence) error) error
	Commit(puts map[EvidenceKey]*Evidence, deletes []EvidenceKey) error
}

// ErrStore is returned by Submit when the observation could not be stored;
// the sender should retry.
var ErrStore = errors.New("storing failed")

// ErrStopped is returned by Submit once the engine has stopped.
var ErrStopped = errors.New("engine stopped")

// maxBatch bounds one group commit: large enough to amortise the fsync,
// small enough to keep the latency of the first request in it low.
const maxBatch = 1024

// gcEvery is how often rollouts past retention are looked for.
const gcEvery = time.Hour

// Engine owns all rollout state. Observations are applied by one goroutine
// (Run) in batches; each batch is committed in one store transaction before
// any of its submitters is answered, so an acknowledged observation is
// durable, and readers see only committed state.
type Engine struct {
	cfg   Config
	store Store
	log   *slog.Logger
	now   func() time.Time

	in       chan *request
	stopped  chan struct{}
	clusters map[string]*cluster
	due      deadlines
	broken   bool // the last commit failed and memory could not be restored from the store
	loading  bool // rebuilding from the store: nothing new is happening

	snap  *snapshot
	stats Stats
}

// Stats counts what the engine did, for metrics and tests.
type Stats struct {
	Observations atomic.Int64 // submitted and committed
	Learned      atomic.Int64 // of those, ones that changed evidence
	Commits      atomic.Int64
	CommitErrors atomic.Int64
}

type request struct {
	obs  Observation
	done chan error
}

// NewEngine loads the stored evidence and publishes a view of every rollout.
func NewEngine(store Store, cfg Config, log *slog.Logger, now func() time.Time) (*Engine, error) {
	if cfg.StuckAfter <= 0 {
		return nil, errors.New("stuck-after must be positive")
	}
	if cfg.DefaultCluster == "" {
		cfg.DefaultCluster = "default"
	}
	e := &Engine{
		cfg: cfg, store: store, log: log, now: now,
		in:      make(chan *request, 4*maxBatch),
		stopped: make(chan struct{}),
		snap:    newSnapshot(),
	}
	if err := e.load(); err != nil {
		return nil, err
	}
	e.collectGarbage()
	return e, nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Submit hands an observation to the engine and returns once it is stored
// (nil), could not be stored (ErrStore), or ctx ended first.
func (e *Engine) Submit(ctx context.Context, o Observation) error {
	if err := e.normalise(&o); err != nil {
		return err
	}
	req := &request{obs: o, done: make(chan error, 1)}
	select {
	case e.in <- req:
	case <-e.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-e.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) normalise(o *Observation) error {
	if o.Cluster == "" {
		o.Cluster = e.cfg.DefaultCluster
	}
	switch {
	case o.Hash == "" || o.Revision == "":
		return errors.New("observation without revision")
	case o.Emitter.Kind == "" || o.Emitter.Namespace == "" || o.Emitter.Name == "":
		return errors.New("observation without emitter")
	case o.At.IsZero():
		return errors.New("observation without time")
	case o.Signal == 0 || o.Signal > SignalArtifact:
		return fmt.Errorf("observation with invalid signal %d", o.Signal)
	}
	o.At = o.At.UTC()
	o.Message = truncate(o.Message, maxMessage)
	for i := range o.Objects {
		o.Objects[i].Error = truncate(o.Objects[i].Error, maxMessage/4)
	}
	return nil
}

// Run applies observations until ctx ends. It also turns rollouts stuck at
// their deadline and collects garbage.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	e.snap.setReady(true)
	defer e.snap.setReady(false)
	gc := time.NewTicker(gcEvery)
	defer gc.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	batch := make([]*request, 0, maxBatch)
	for {
		timer.Reset(e.due.wait(e.now()))
		select {
		case <-ctx.Done():
			return nil
		case req := <-e.in:
			batch = append(batch[:0], req)
		drain:
			for len(batch) < maxBatch {
				select {
				case req := <-e.in:
					batch = append(batch, req)
				default:
					break drain
				}
			}
			e.process(batch)
			clear(batch)
		case <-timer.C:
			e.expire()
		case <-gc.C:
			e.collectGarbage()
		}
	}
}

// process merges a batch, commits what changed in one transaction, and only
// then answers the submitters and publishes the new views.
func (e *Engine) process(batch []*request) {
	if e.broken {
		if err := e.load(); err != nil {
			e.answer(batch, fmt.Errorf("%w: %v", ErrStore, err))
			return
		}
	}
	now := e.now()
	changed := make(map[EvidenceKey]*Evidence)
	for _, req := range batch {
		o := &req.obs
		ek := EvidenceKey{Key{o.Cluster, o.Hash}, o.Emitter}
		ev, pending := changed[ek]
		if !pending {
			ev = e.cluster(o.Cluster).get(o.Hash, o.Emitter).clone()
		}
		if ev.merge(*o) && !pending {
			changed[ek] = ev
		}
	}
	if len(changed) == 0 {
		e.answer(batch, nil)
		return
	}
	e.stats.Learned.Add(int64(len(changed)))
	// Install first, so the views (and, later, the mails they make due) are
	// computed from the state being committed; undo by reloading on failure.
	dirty := make(map[Key]struct{})
	for ek, ev := range changed {
		e.clusters[ek.Cluster].set(ek.Hash, ek.Emitter, ev)
	}
	for ek := range changed {
		e.clusters[ek.Cluster].neighbours(ek.Hash, ek.Emitter, dirty)
	}
	views := e.evaluate(dirty, now)
	if err := e.store.Commit(changed, nil); err != nil {
		e.stats.CommitErrors.Add(1)
		e.log.Error("commit observations", "err", err, "observations", len(batch))
		if lerr := e.load(); lerr != nil {
			e.log.Error("restore state from store", "err", lerr)
		}
		e.answer(batch, fmt.Errorf("%w: %v", ErrStore, err))
		return
	}
	e.stats.Commits.Add(1)
	e.publish(views)
	e.answer(batch, nil)
}

func (e *Engine) answer(batch []*request, err error) {
	if err == nil {
		e.stats.Observations.Add(int64(len(batch)))
	}
	for _, req := range batch {
		req.done <- err
	}
}

func (e *Engine) cluster(name string) *cluster {
	c := e.clusters[name]
	if c == nil {
		c = newCluster(name)
		e.clusters[name] = c
	}
	return c
}

func (c *cluster) get(hash string, e Emitter) *Evidence {
	if r := c.rollouts[hash]; r != nil {
		return r.ev[e]
	}
	return nil
}

// evaluate computes the views of the given rollouts without publishing them.
func (e *Engine) evaluate(keys map[Key]struct{}, now time.Time) []*View {
	views := make([]*View, 0, len(keys))
	for k := range keys {
		c := e.clusters[k.Cluster]
		if r := c.rollouts[k.Hash]; r != nil {
			views = append(views, c.evaluate(r, &e.cfg, now))
		}
	}
	return views
}

// publish makes views visible to readers, logs verdict changes and arms the
// deadline of every rollout that started applying.
func (e *Engine) publish(views []*View) {
	e.snap.publish(e.changedViews(views), nil, false)
}

func (e *Engine) changedViews(views []*View) []*View {
	changed := views[:0]
	for _, v := range views {
		r := e.clusters[v.Cluster].rollouts[v.Hash]
		old := r.view
		if old != nil && reflect.DeepEqual(old, v) {
			continue
		}
		r.view = v
		changed = append(changed, v)
		if v.Verdict == VerdictApplying && (old == nil || old.Verdict != VerdictApplying || !old.Deadline.Equal(v.Deadline)) {
			heap.Push(&e.due, deadline{v.Deadline, r.key})
		}
		if old == nil && e.loading {
			continue
		}
		if old == nil || old.Verdict != v.Verdict {
			from := "none"
			if old != nil {
				from = old.Verdict.String()
			}
			e.log.Info("rollout verdict", "cluster", v.Cluster, "revision", v.Revision,
				"verdict", v.Verdict.String(), "from", from, "summary", v.Summary)
		}
	}
	return changed
}

// expire re-evaluates the rollouts whose deadline has passed.
func (e *Engine) expire() {
	now := e.now()
	keys := map[Key]struct{}{}
	for len(e.due) > 0 && !e.due[0].at.After(now) {
		d := heap.Pop(&e.due).(deadline)
		keys[d.key] = struct{}{}
	}
	for k := range keys {
		if c := e.clusters[k.Cluster]; c == nil || c.rollouts[k.Hash] == nil {
			delete(keys, k)
		}
	}
	if len(keys) > 0 {
		e.publish(e.evaluate(keys, now))
	}
}

// load rebuilds all state from the store and publishes every view.
func (e *Engine) load() error {
	e.clusters = map[string]*cluster{}
	e.due = nil
	err := e.store.Load(func(ek EvidenceKey, ev *Evidence) error {
		e.cluster(ek.Cluster).set(ek.Hash, ek.Emitter, ev)
		return nil
	})
	e.broken = err != nil
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	all := map[Key]struct{}{}
	for _, c := range e.clusters {
		for _, r := range c.rollouts {
			all[r.key] = struct{}{}
		}
	}
	e.loading = true
	defer func() { e.loading = false }()
	e.snap.publish(e.changedViews(e.evaluate(all, e.now())), nil, true)
	return nil
}

// collectGarbage forgets rollouts whose last evidence is older than the
// retention, unless some emitter is still at that revision: the current
// revision of a layer is what the next rollout's expected layers come from.
func (e *Engine) collectGarbage() {
	if e.cfg.Retention <= 0 || e.broken {
		return
	}
	cutoff := e.now().Add(-e.cfg.Retention)
	var (
		deletes []EvidenceKey
		gone    []Key
	)
	for _, c := range e.clusters {
		for hash, r := range c.rollouts {
			if !r.last.Before(cutoff) || c.isCurrent(r) {
				continue
			}
			for em := range r.ev {
				deletes = append(deletes, EvidenceKey{r.key, em})
			}
			gone = append(gone, Key{c.name, hash})
		}
	}
	if len(gone) == 0 {
		return
	}
	if err := e.store.Commit(nil, deletes); err != nil {
		e.log.Warn("garbage-collect rollouts", "err", err)
		return
	}
	for _, k := range gone {
		e.clusters[k.Cluster].drop(k.Hash)
	}
	e.snap.publish(nil, gone, false)
	e.log.Info("garbage-collected rollouts", "count", len(gone), "retention", e.cfg.Retention.String())
}

func (c *cluster) isCurrent(r *rolloutState) bool {
	for em := range r.ev {
		if c.logs[em].latest() == r.key.Hash {
			return true
		}
	}
	return false
}

// deadline is when a rollout still applying turns stuck.
type deadline struct {
	at  time.Time
	key Key
}

// deadlines is a min-heap; entries for rollouts that moved on are dropped
// when they fire.
type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// wait is how long until the next deadline, capped so the loop wakes up
// at least every hour.
func (d deadlines) wait(now time.Time) time.Duration {
	if len(d) == 0 {
		return time.Hour
	}
	w := d[0].at.Sub(now)
	if w < 0 {
		return 0
	}
	return min(w, time.Hour)
}
