package rollout

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	broken   bool // memory could not be restored from the store after a failed commit
	reload   bool // a commit failed: fail what is in flight, then restore memory
	loading  bool // rebuilding from the store: nothing new is happening
	inflight int  // commits handed to the committer and not yet finished
	nextSeq  uint64
	// submit hands a commit to the committer; before Run it commits inline.
	submit func(*commit)

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
	e.submit = func(c *commit) { // inline until Run starts the committer
		if len(c.changed) > 0 || len(c.deletes) > 0 {
			c.err = e.store.Commit(c.changed, c.deletes)
		}
		e.inflight++
		e.finish(c)
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
//
// Merging and committing are pipelined: while one batch is being written
// and fsynced, the next is merged. Commits complete in order, and a batch's
// submitters are answered and its views published only once its commit and
// every one before it succeeded.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	commits := make(chan *commit, maxInflight)
	results := make(chan *commit, maxInflight)
	go func() {
		for c := range commits {
			if len(c.changed) > 0 || len(c.deletes) > 0 {
				c.err = e.store.Commit(c.changed, c.deletes)
			}
			results <- c
		}
	}()
	e.submit = func(c *commit) {
		e.inflight++
		commits <- c
	}
	defer func() {
		close(commits)
		for e.inflight > 0 {
			e.finish(<-results)
		}
	}()

	e.snap.setReady(true)
	defer e.snap.setReady(false)
	gc := time.NewTicker(gcEvery)
	defer gc.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(e.due.wait(e.now()))
		// Take new work only while the pipeline has room and memory agrees
		// with the store.
		in := e.in
		if e.inflight >= maxInflight || e.reload {
			in = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case c := <-results:
			e.finish(c)
		case req := <-in:
			batch := make([]*request, 1, 64)
			batch[0] = req
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
		case <-timer.C:
			e.expire()
		case <-gc.C:
			e.collectGarbage()
		}
	}
}

// maxInflight bounds the batches merged but not yet committed.
const maxInflight = 2

// commit is one batch on its way to the store.
type commit struct {
	batch   []*request
	changed map[EvidenceKey]*Evidence
	deletes []EvidenceKey
	views   []*View  // to publish once committed
	removed []Key    // rollouts to unpublish once committed
	changes []change // verdict changes to log once committed
	err     error
}

type change struct {
	view *View
	from Verdict
	new  bool
}

// process merges a batch into memory, computes the views it changes and
// hands both to the committer.
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
		r := e.cluster(o.Cluster).rollout(o.Hash, e.nextSeq)
		if r.seq == e.nextSeq {
			e.nextSeq++
		}
		ek := EvidenceKey{r.key, r.seq, o.Emitter}
		ev, pending := changed[ek]
		if !pending {
			ev = r.ev[o.Emitter].clone()
		}
		if ev.merge(*o) && !pending {
			changed[ek] = ev
		}
	}
	c := &commit{batch: batch, changed: changed}
	if len(changed) > 0 {
		e.stats.Learned.Add(int64(len(changed)))
		// Install first, so the views (and the mails they make due) are
		// computed from the state being committed; a failed commit is undone
		// by reloading from the store.
		byRollout := make(map[Key][]Emitter)
		for ek, ev := range changed {
			e.clusters[ek.Cluster].set(ek.Hash, ek.Emitter, ev)
			byRollout[ek.Key] = append(byRollout[ek.Key], ek.Emitter)
		}
		dirty := make(map[Key]struct{})
		for k, ems := range byRollout {
			e.clusters[k.Cluster].affected(k.Hash, ems, dirty)
		}
		e.recompute(c, dirty, now)
	}
	// Even a batch that taught nothing waits its turn: what it repeats may
	// be known only from a batch still being committed.
	e.submit(c)
}

// finish completes a commit: answers its submitters and publishes its
// views, or, when it or an earlier one failed, fails them and restores
// memory from the store once nothing is in flight.
func (e *Engine) finish(c *commit) {
	e.inflight--
	if c.err != nil {
		e.stats.CommitErrors.Add(1)
		e.log.Error("commit observations", "err", c.err, "observations", len(c.batch))
		e.reload = true
	}
	if e.reload {
		// Later batches may have been merged on top of the failed one.
		e.answer(c.batch, fmt.Errorf("%w: %v", ErrStore, c.err))
		if e.inflight == 0 {
			if err := e.load(); err != nil {
				e.log.Error("restore state from store", "err", err)
			}
			e.reload = false
		}
		return
	}
	if len(c.changed) > 0 || len(c.deletes) > 0 {
		e.stats.Commits.Add(1)
	}
	for _, ch := range c.changes {
		from := "none"
		if !ch.new {
			from = ch.from.String()
		}
		e.log.Info("rollout verdict", "cluster", ch.view.Cluster, "revision", ch.view.Revision,
			"verdict", ch.view.Verdict.String(), "from", from, "summary", ch.view.Summary)
	}
	e.snap.publish(c.views, c.removed, false)
	e.answer(c.batch, nil)
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

// recompute evaluates the given rollouts and records in c the views that
// changed, with their verdict changes, and arms the deadline of every
// rollout that started applying.
func (e *Engine) recompute(c *commit, keys map[Key]struct{}, now time.Time) {
	for k := range keys {
		cl := e.clusters[k.Cluster]
		r := cl.rollouts[k.Hash]
		if r == nil {
			continue
		}
		// Every recomputed view is republished: comparing it with the old
		// one would cost more than waking the few readers waiting on it.
		v := cl.evaluate(r, &e.cfg, now)
		old := r.view
		r.view = v
		c.views = append(c.views, v)
		if v.Verdict == VerdictApplying && (old == nil || old.Verdict != VerdictApplying || !old.Deadline.Equal(v.Deadline)) {
			heap.Push(&e.due, deadline{v.Deadline, r.key})
		}
		switch {
		case old == nil && !e.loading:
			c.changes = append(c.changes, change{view: v, new: true})
		case old != nil && old.Verdict != v.Verdict:
			c.changes = append(c.changes, change{view: v, from: old.Verdict})
		}
	}
}

// expire re-evaluates the rollouts whose deadline has passed. The views go
// through the commit queue so that readers never see them ahead of the
// evidence they were computed from.
func (e *Engine) expire() {
	now := e.now()
	keys := map[Key]struct{}{}
	for len(e.due) > 0 && !e.due[0].at.After(now) {
		d := heap.Pop(&e.due).(deadline)
		if c := e.clusters[d.key.Cluster]; c != nil && c.rollouts[d.key.Hash] != nil {
			keys[d.key] = struct{}{}
		}
	}
	if len(keys) == 0 || e.reload || e.broken {
		return
	}
	c := &commit{}
	e.recompute(c, keys, now)
	e.submit(c)
}

// load rebuilds all state from the store and publishes every view.
func (e *Engine) load() error {
	e.clusters = map[string]*cluster{}
	e.due = nil
	e.nextSeq = 1
	err := e.store.Load(func(ek EvidenceKey, ev *Evidence) error {
		c := e.cluster(ek.Cluster)
		c.rollout(ek.Hash, ek.Seq)
		c.set(ek.Hash, ek.Emitter, ev)
		e.nextSeq = max(e.nextSeq, ek.Seq+1)
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
	c := &commit{}
	e.recompute(c, all, e.now())
	e.snap.publish(c.views, nil, true)
	return nil
}

// collectGarbage forgets rollouts whose last evidence is older than the
// retention, unless some emitter is still at that revision: the current
// revision of a layer is what the next rollout's expected layers come from.
func (e *Engine) collectGarbage() {
	if e.cfg.Retention <= 0 || e.broken || e.reload {
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
				deletes = append(deletes, EvidenceKey{r.key, r.seq, em})
			}
			gone = append(gone, Key{c.name, hash})
		}
	}
	if len(gone) == 0 {
		return
	}
	for _, k := range gone {
		e.clusters[k.Cluster].drop(k.Hash)
	}
	e.log.Info("garbage-collecting rollouts", "count", len(gone), "retention", e.cfg.Retention.String())
	e.submit(&commit{deletes: deletes, removed: gone})
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
