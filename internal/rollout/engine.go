package rollout

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// MailTo receive every mail (--mail-to); Alerts add recipients per layer.
	MailTo []string
	// SettleAfter is how long a terminal rollout whose emitters all moved
	// on must stay quiet before it is settled: compacted into its final
	// view on disk, its evidence dropped. It covers late deliveries
	// (notification-controller retries within its Provider timeout, 15 s
	// by default). Zero means DefaultSettleAfter.
	SettleAfter time.Duration
	// Verify checks, after every batch, each live view against a fresh
	// evaluation and panics on a difference (tests: incremental.go).
	Verify bool
}

// DefaultSettleAfter is the SettleAfter used when none is set.
const DefaultSettleAfter = time.Hour

// Store keeps evidence and the mail outbox durably. Commit is one
// transaction: all or nothing.
type Store interface {
	// Load calls evidence for every record of a live rollout, mailed for
	// the key of every mail enqueued for one (pending, sent or dead), and
	// floor for every emitter's floor.
	Load(evidence func(EvidenceKey, *Evidence) error, mailed func(key string), floor func(FloorKey, Floor)) error
	Commit(b *Batch) error
	Archive
}

// Archive holds the settled rollouts: final views, read when asked for.
type Archive interface {
	// Settled returns the view of a settled rollout, or nil.
	Settled(k Key) (*View, error)
	// SettledAmong reports which of keys are settled.
	SettledAmong(keys []Key) (map[Key]bool, error)
	// SettledKeys returns up to limit settled rollouts whose hash (with
	// origin: whose origin revision's hash) is hash, or with prefix starts
	// with it, on cluster unless it is "".
	SettledKeys(hash string, prefix, origin bool, cluster string, limit int) ([]Key, error)
	// ListSettled returns at least limit settled rollouts, when there are,
	// newest first by first evidence, and all that began with the last.
	ListSettled(cluster string, limit int) ([]*View, error)
}

// Batch is one transaction's worth of changes.
type Batch struct {
	Puts    map[EvidenceKey]*Evidence
	Deletes []EvidenceKey
	Forget  []Key  // rollouts collected or settled: the keys of their mails go too
	Mails   []Mail // mails made due, for the outbox
	// Settle are the final views of rollouts that can no longer change;
	// their evidence is in Deletes.
	Settle []*View
	// Floors are the emitters' floors the settled rollouts raised.
	Floors map[FloorKey]Floor
	// PurgeBefore, when set, drops settled rollouts whose last evidence is
	// older (retention).
	PurgeBefore time.Time
	At          time.Time
}

// FloorKey names one emitter of one cluster.
type FloorKey struct {
	Cluster string
	Emitter Emitter
}

// Floor is the newest entry of an emitter's log that was settled (its first
// evidence and hash). Evidence for a revision new to the emitter whose
// predecessor in the log would be settled (it is older than the floor, or
// between the floor and the next live entry) is about history that no
// longer exists, so it is ignored.
type Floor struct {
	First time.Time
	Hash  string
}

// ErrStore is returned by Submit when the observation could not be stored;
// the sender should retry.
var ErrStore = errors.New("storing failed")

// ErrStopped is returned by Submit once the engine has stopped.
var ErrStopped = errors.New("engine stopped")

// gcEvery is how often rollouts past retention are looked for.
const gcEvery = time.Hour

// settleEvery is how often rollouts that can no longer change are looked
// for. The pass is linear in the live set, which is small.
const settleEvery = 10 * time.Second

// settleBudget bounds the time of one settle pass: a backlog (a burst of
// old rollouts, the first start after an upgrade) is settled in slices
// settleSoon apart, between batches, instead of holding them up.
const (
	settleBudget = 2 * time.Millisecond
	settleSoon   = 20 * time.Millisecond
)

// Engine owns all rollout state. Observations are applied in batches by a
// leader: the submitter that finds no batch under way takes every queued
// request, merges them, commits them in one store transaction (group
// commit), and only then answers them all. An acknowledged observation is
// therefore durable, and readers see only committed state. Leading in the
// submitter's own goroutine keeps the commit path free of hand-offs to
// other goroutines, each of which would wait its turn on a busy scheduler.
type Engine struct {
	cfg   Config
	store Store
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex // guards queue, leading and closed
	idle    *sync.Cond // signalled when leadership ends
	queue   []*request
	leading bool
	closed  bool

	// Owned by the leader.
	clusters map[string]*cluster
	due      deadlines
	broken   bool // memory could not be restored from the store after a failed commit
	loading  bool // rebuilding from the store: nothing new is happening
	nextSeq  uint64

	mailed map[string]struct{} // keys of every mail enqueued: each goes out once
	// stuckMailed: rollouts whose stuck mail was enqueued, to anyone (load).
	stuckMailed map[Key]bool

	nextDue    atomic.Int64  // unix nanos of the earliest deadline, for Run's timer
	settleMore atomic.Bool   // the last settle pass ran out of time
	rearm      chan struct{} // tells Run an earlier deadline was armed
	notify     func()        // told when mails were enqueued
	onTerm     func(v *View) // told when a rollout turns terminal

	snap  *snapshot
	stats Stats
}

// Stats counts what the engine did, for metrics and tests.
type Stats struct {
	Observations atomic.Int64 // submitted and committed
	Learned      atomic.Int64 // of those, ones that changed evidence
	Commits      atomic.Int64
	CommitErrors atomic.Int64
	Settled      atomic.Int64 // rollouts settled
	Ignored      atomic.Int64 // observations about settled history
}

// request is an observation to apply, or housekeeping for the leader to run.
type request struct {
	obs  []Observation // applied in one batch, seen together
	tick func(c *commit, now time.Time)
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
	if cfg.SettleAfter <= 0 {
		cfg.SettleAfter = DefaultSettleAfter
	}
	e := &Engine{
		cfg: cfg, store: store, log: log, now: now,
		rearm: make(chan struct{}, 1),
		snap:  newSnapshot(),
	}
	e.idle = sync.NewCond(&e.mu)
	if err := e.load(); err != nil {
		return nil, err
	}
	// Collect garbage and settle before serving; a failure is logged and
	// retried by Run.
	c := &commit{}
	t := now()
	e.collectGarbage(c, t)
	e.settle(c, t)
	_ = e.write(c)
	return e, nil
}

// OnMail sets a function called after a commit that enqueued mails (the
// outbox dispatcher's wake-up). Call it before Run.
func (e *Engine) OnMail(f func()) { e.notify = f }

// OnTerminal sets a function called, after the commit, for each rollout
// whose verdict just turned terminal (metrics). Call it before Run.
func (e *Engine) OnTerminal(f func(v *View)) { e.onTerm = f }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Submit hands an observation to the engine and returns once it is stored
// (nil), could not be stored (ErrStore), or ctx ended first.
func (e *Engine) Submit(ctx context.Context, o Observation) error {
	if err := e.normalise(&o); err != nil {
		return err
	}
	return e.do(ctx, &request{obs: []Observation{o}, done: make(chan error, 1)})
}

// SubmitAll stores observations that belong together in one batch: no
// reader ever sees some of them without the others. The cluster reader
// uses it for the membership marks of all layers of a source, so that a
// rollout is never judged on part of its expected layers.
func (e *Engine) SubmitAll(ctx context.Context, obs []Observation) error {
	if len(obs) == 0 {
		return nil
	}
	for i := range obs {
		if err := e.normalise(&obs[i]); err != nil {
			return err
		}
	}
	return e.do(ctx, &request{obs: obs, done: make(chan error, 1)})
}

// do queues a request, leads the batch when none is under way, and waits
// for the request's answer.
func (e *Engine) do(ctx context.Context, req *request) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrStopped
	}
	e.queue = append(e.queue, req)
	lead := !e.leading
	e.leading = true
	e.mu.Unlock()
	if lead {
		e.lead()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lead processes batches in the caller's goroutine while requests keep
// arriving, for at most leadRounds batches; then, if more are queued, it
// passes leadership to a new goroutine, so that the caller's own client is
// not kept waiting behind other batches for long. Staying leader for a few
// rounds spares the commit path a hand-off to a goroutine that would wait
// its turn on a busy scheduler.
func (e *Engine) lead() {
	defer func() {
		// A panic (a bug; Verify's check) must not leave leadership taken:
		// Run, and the shutdown waiting on it, would wait forever.
		if p := recover(); p != nil {
			e.mu.Lock()
			e.leading, e.closed = false, true
			e.idle.Broadcast()
			e.mu.Unlock()
			panic(p)
		}
	}()
	for round := 0; ; round++ {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.leading = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		}
		if round == leadRounds {
			e.mu.Unlock()
			go e.lead()
			return
		}
		n := min(len(e.queue), maxBatch)
		batch := make([]*request, n)
		copy(batch, e.queue)
		e.queue = append(e.queue[:0], e.queue[n:]...)
		e.mu.Unlock()
		e.process(batch)
	}
}

// leadRounds bounds how many batches one submitter leads.
const leadRounds = 4

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
	case o.Signal == 0 || o.Signal > SignalSuspended:
		return fmt.Errorf("observation with invalid signal %d", o.Signal)
	}
	o.At = o.At.UTC()
	o.Message = truncate(o.Message, maxMessage)
	for i := range o.Objects {
		o.Objects[i].Error = truncate(o.Objects[i].Error, maxMessage/4)
	}
	return nil
}

// Run marks the engine ready and runs its housekeeping until ctx ends:
// rollouts turn stuck at their deadline, old ones are garbage-collected.
// When it returns, queued requests have been answered and new ones are
// refused.
func (e *Engine) Run(ctx context.Context) error {
	e.snap.setReady(true)
	defer func() {
		e.snap.setReady(false)
		e.mu.Lock()
		e.closed = true
		for e.leading {
			e.idle.Wait()
		}
		e.mu.Unlock()
	}()
	gc := time.NewTicker(gcEvery)
	defer gc.Stop()
	settle := time.NewTimer(e.untilSettle())
	defer settle.Stop()
	timer := time.NewTimer(e.untilDue())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.rearm:
		case <-timer.C:
			if err := e.do(ctx, &request{tick: e.expire, done: make(chan error, 1)}); err != nil && ctx.Err() == nil {
				e.log.Warn("turn rollouts stuck", "err", err)
			}
		case <-gc.C:
			if err := e.do(ctx, &request{tick: e.collectGarbage, done: make(chan error, 1)}); err != nil && ctx.Err() == nil {
				e.log.Warn("garbage-collect rollouts", "err", err)
			}
		case <-settle.C:
			if err := e.do(ctx, &request{tick: e.settle, done: make(chan error, 1)}); err != nil && ctx.Err() == nil {
				e.log.Warn("settle rollouts", "err", err)
			}
			settle.Reset(e.untilSettle())
		}
		timer.Reset(e.untilDue())
	}
}

// untilSettle is how long until the next settle pass: soon when the last
// one ran out of time.
func (e *Engine) untilSettle() time.Duration {
	if e.settleMore.Load() {
		return settleSoon
	}
	return settleEvery
}

// untilDue is how long until the earliest deadline, at most an hour.
func (e *Engine) untilDue() time.Duration {
	n := e.nextDue.Load()
	if n == 0 {
		return time.Hour
	}
	return min(max(time.Unix(0, n).Sub(e.now()), 0), time.Hour)
}

// maxBatch bounds one group commit: large enough to amortise the fsync,
// small enough to keep the latency of the first request in it low.
const maxBatch = 1024

// commit is what one batch writes and then publishes.
type commit struct {
	changed map[EvidenceKey]*Evidence
	deletes []EvidenceKey
	views   []*View  // to publish once committed
	removed []Key    // rollouts to unpublish once committed
	changes []change // verdict changes to log once committed
	mails   []Mail   // made due, enqueued in the same transaction
	settled []*View  // final views of the rollouts settled
	floors  map[FloorKey]Floor
	purge   time.Time // retention of settled rollouts
}

type change struct {
	view *View
	from Verdict
	new  bool
}

// process merges a batch into memory, runs its housekeeping, commits
// everything in one transaction and answers every request in it.
func (e *Engine) process(batch []*request) {
	if e.broken {
		if err := e.load(); err != nil {
			e.answer(batch, fmt.Errorf("%w: %v", ErrStore, err))
			return
		}
	}
	now := e.now()
	c := &commit{changed: make(map[EvidenceKey]*Evidence)}
	settled, err := e.settledAmong(batch)
	if err != nil {
		e.answer(batch, fmt.Errorf("%w: %v", ErrStore, err))
		return
	}
	// Emitters that have evidence on a rollout in this batch, by rollout.
	inBatch := map[Key]map[Emitter]bool{}
	for _, req := range batch {
		for i := range req.obs {
			o := &req.obs[i]
			k := Key{o.Cluster, o.Hash}
			if settled[k] {
				e.stats.Ignored.Add(1)
				continue
			}
			cl := e.cluster(o.Cluster)
			if cl.beforeFloor(o, inBatch[k][o.Emitter]) {
				e.stats.Ignored.Add(1)
				continue
			}
			if inBatch[k] == nil {
				inBatch[k] = map[Emitter]bool{}
			}
			inBatch[k][o.Emitter] = true
			r := cl.rollout(o.Hash, e.nextSeq)
			if r.seq == e.nextSeq {
				e.nextSeq++
			}
			ek := EvidenceKey{r.key, r.seq, o.Emitter}
			ev, pending := c.changed[ek]
			if !pending {
				ev = r.ev[o.Emitter].clone()
			}
			if ev.merge(*o) && !pending {
				c.changed[ek] = ev
			}
		}
	}
	if len(c.changed) > 0 {
		e.stats.Learned.Add(int64(len(c.changed)))
		// Install first, so the views (and the mails they make due) are
		// computed from the state being committed; a failed commit is undone
		// by reloading from the store.
		dirty := dirtySet{}
		visible := map[*rolloutState]bool{}
		for ek, ev := range c.changed {
			cl := e.clusters[ek.Cluster]
			if cl.set(ek.Hash, ek.Emitter, ev, dirty) {
				visible[cl.rollouts[ek.Hash]] = true
			}
		}
		// Once every entry of the batch is in the logs: the rollouts that
		// read a changed one as their predecessor.
		for r := range visible {
			dirty.successors(r)
		}
		e.recompute(c, dirty, now)
	}
	for _, req := range batch {
		if req.tick != nil {
			req.tick(c, now)
		}
	}
	if e.cfg.Verify {
		e.verify()
	}
	e.answer(batch, e.write(c))
}

// write commits c and publishes what it computed; on failure it restores
// memory from the store, so that nothing unstored is ever acknowledged.
func (e *Engine) write(c *commit) error {
	if len(c.changed) > 0 || len(c.deletes) > 0 || len(c.mails) > 0 || len(c.settled) > 0 || !c.purge.IsZero() {
		b := &Batch{Puts: c.changed, Deletes: c.deletes, Forget: c.removed, Mails: c.mails,
			Settle: c.settled, Floors: c.floors, PurgeBefore: c.purge, At: e.now()}
		if err := e.store.Commit(b); err != nil {
			e.stats.CommitErrors.Add(1)
			e.log.Error("commit observations", "err", err)
			if lerr := e.load(); lerr != nil {
				e.log.Error("restore state from store", "err", lerr)
			}
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
		e.stats.Commits.Add(1)
		e.stats.Settled.Add(int64(len(c.settled)))
	}
	for _, ch := range c.changes {
		from := "none"
		if !ch.new {
			from = ch.from.String()
		}
		e.log.Info("rollout verdict", "cluster", ch.view.Cluster, "revision", ch.view.Revision,
			"verdict", ch.view.Verdict.String(), "from", from, "summary", ch.view.Summary)
		if e.onTerm != nil && ch.view.Terminal && (ch.new || !ch.from.Terminal()) {
			e.onTerm(ch.view)
		}
	}
	e.snap.publish(c.views, c.removed, false)
	e.armDeadline()
	if len(c.mails) > 0 && e.notify != nil {
		e.notify()
	}
	return nil
}

func (e *Engine) answer(batch []*request, err error) {
	n := 0
	for _, req := range batch {
		n += len(req.obs)
		req.done <- err
	}
	if err == nil {
		e.stats.Observations.Add(int64(n))
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

// recompute evaluates the given rollouts, records their views and verdict
// changes in c, and arms the deadline of every rollout that started
// applying.
func (e *Engine) recompute(c *commit, dirty dirtySet, now time.Time) {
	for r, d := range dirty {
		cl := e.clusters[r.key.Cluster]
		if cl == nil || cl.rollouts[r.key.Hash] != r {
			continue
		}
		// Every recomputed view is republished: comparing it with the old
		// one would cost more than waking the few readers waiting on it.
		v := cl.evaluateIn(r, d, &e.cfg, now)
		old := r.view
		r.view, r.evalAt = v, now
		c.views = append(c.views, v)
		if v.Verdict == VerdictApplying && (old == nil || old.Verdict != VerdictApplying || !old.Deadline.Equal(v.Deadline)) {
			heap.Push(&e.due, deadline{v.Deadline, r.key})
		}
		for _, m := range dueMails(v, e.cfg.MailTo, r.routes) {
			// Mails evidence makes due were decided when the evidence was
			// committed, so a reload decides none of them: new configuration
			// never mails old rollouts. The stuck mail is made due by the
			// clock alone; if the deadline passed while the service was down
			// (or its commit failed), the reload is the first to see it.
			if e.loading && (m.Kind != MailStuck || e.stuckMailed[r.key]) {
				continue
			}
			if _, ok := e.mailed[m.Key]; !ok {
				e.mailed[m.Key] = struct{}{}
				c.mails = append(c.mails, m)
			}
		}
		switch {
		case old == nil && !e.loading:
			c.changes = append(c.changes, change{view: v, new: true})
		case old != nil && old.Verdict != v.Verdict:
			c.changes = append(c.changes, change{view: v, from: old.Verdict})
		}
	}
}

// expire re-evaluates the rollouts whose deadline has passed.
func (e *Engine) expire(c *commit, now time.Time) {
	dirty := dirtySet{}
	for len(e.due) > 0 && !e.due[0].at.After(now) {
		d := heap.Pop(&e.due).(deadline)
		if cl := e.clusters[d.key.Cluster]; cl != nil {
			dirty.touch(cl.rollouts[d.key.Hash])
		}
	}
	e.recompute(c, dirty, now)
}

// reread evaluates every rollout of the clusters whose live set lost
// rollouts, as a restart would: what their views read may have gone with
// them, and no evaluation may rest on a rollout no longer in memory. Like
// a restart, it decides no mail but the clock's.
func (e *Engine) reread(c *commit, clusters map[*cluster]bool, now time.Time) {
	dirty := dirtySet{}
	for cl := range clusters {
		for _, r := range cl.rollouts {
			dirty.full(r)
		}
	}
	e.loading = true
	e.recompute(c, dirty, now)
	e.loading = false
}

// armDeadline tells Run when the next rollout may turn stuck.
func (e *Engine) armDeadline() {
	var next int64
	if len(e.due) > 0 {
		next = e.due[0].at.UnixNano()
	}
	if old := e.nextDue.Swap(next); next != 0 && (old == 0 || next < old) {
		select {
		case e.rearm <- struct{}{}:
		default:
		}
	}
}

// load rebuilds all state from the store and publishes every view.
func (e *Engine) load() error {
	e.clusters = map[string]*cluster{}
	e.due = nil
	e.broken = true // until the load below succeeds
	e.nextSeq = 1
	e.mailed = map[string]struct{}{}
	err := e.store.Load(func(ek EvidenceKey, ev *Evidence) error {
		c := e.cluster(ek.Cluster)
		c.rollout(ek.Hash, ek.Seq)
		c.set(ek.Hash, ek.Emitter, ev, nil)
		e.nextSeq = max(e.nextSeq, ek.Seq+1)
		return nil
	}, func(key string) { e.mailed[key] = struct{}{} }, func(fk FloorKey, f Floor) {
		e.cluster(fk.Cluster).floors[fk.Emitter] = logEntry{f.First, f.Hash}
	})
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	e.broken = false
	all := dirtySet{}
	for _, c := range e.clusters {
		for _, r := range c.rollouts {
			all.full(r)
		}
	}
	e.stuckMailed = map[Key]bool{}
	for key := range e.mailed {
		if mk, err := ParseMailKey(key); err == nil && mk.Kind == MailStuck {
			e.stuckMailed[mk.Rollout] = true
		}
	}
	e.loading = true
	c := &commit{}
	e.recompute(c, all, e.now())
	e.loading = false
	if e.cfg.Verify {
		e.verify()
	}
	e.snap.publish(c.views, nil, true)
	e.armDeadline()
	if len(c.mails) > 0 {
		// Stuck mails that came due while no commit could decide them.
		if err := e.store.Commit(&Batch{Mails: c.mails, At: e.now()}); err != nil {
			for _, m := range c.mails {
				delete(e.mailed, m.Key) // decided again at the next load
			}
			e.log.Error("enqueue stuck mails", "err", err)
		} else if e.notify != nil {
			e.notify()
		}
	}
	return nil
}

// collectGarbage forgets rollouts whose last evidence is older than the
// retention, unless some emitter is still at that revision: the current
// revision of a layer is what the next rollout's expected layers come from.
// Settled rollouts past the retention go in the same commit.
func (e *Engine) collectGarbage(c *commit, now time.Time) {
	if e.cfg.Retention <= 0 {
		return
	}
	cutoff := now.Add(-e.cfg.Retention)
	c.purge = cutoff
	from := len(c.removed)
	var gone []*rolloutState
	lost := map[*cluster]bool{}
	for _, cl := range e.clusters {
		for _, r := range cl.rollouts {
			if r.last.Before(cutoff) && !cl.isCurrent(r) {
				gone = append(gone, r)
				lost[cl] = true
			}
		}
	}
	for _, r := range gone {
		e.retire(c, r)
	}
	e.forgetMails(c.removed[from:])
	e.reread(c, lost, now)
	if len(gone) > 0 {
		e.log.Info("garbage-collecting rollouts", "count", len(gone), "retention", e.cfg.Retention.String())
	}
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
