// Package engine runs the rollout model as a service: it applies
// observations in group commits, stores each step before acknowledging it,
// publishes the views readers see, and runs the model's clock (deadlines,
// settling, retention).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Store keeps evidence and the mail outbox durably. Commit is one
// transaction: all or nothing.
type Store interface {
	rollout.Loader
	Commit(b *rollout.Batch) error
	Archive
}

// Archive holds the settled rollouts: final views, read when asked for.
type Archive interface {
	// Settled returns the view of a settled rollout, or nil.
	Settled(k rollout.Key) (*rollout.View, error)
	// SettledClusters returns the clusters settled rollouts are of.
	SettledClusters() ([]string, error)
	// SettledAmong reports which of keys are settled.
	SettledAmong(keys []rollout.Key) (map[rollout.Key]bool, error)
	// SettledKeys returns up to limit settled rollouts whose hash (with
	// origin: whose origin revision's hash) is hash, or with prefix starts
	// with it, on cluster unless it is "".
	SettledKeys(hash string, prefix, origin bool, cluster string, limit int) ([]rollout.Key, error)
	// ScanSettled calls fn with settled rollouts newest first, from those
	// that began at until or before (all when zero), until fn returns false.
	ScanSettled(cluster string, until time.Time, fn func(*rollout.View) bool) error
}

// ErrStore is returned by Submit when the observation could not be stored;
// the sender should retry.
var ErrStore = errors.New("storing failed")

// ErrStopped is returned by Submit once the engine has stopped.
var ErrStopped = errors.New("engine stopped")

// gcEvery is how often rollouts past retention are looked for.
const gcEvery = time.Hour

// settleEvery is how often rollouts that can no longer change are looked
// for. The pass is linear in the live set, and a look at one that cannot
// settle yet is cheap; what a rollout holds until its pass (evidence, last
// evaluation, view: about 1.5 KiB a layer) is not: a fleet whose rollouts
// can settle as soon as they apply would pile up every rollout of the
// interval in memory, and 10 s of a busy fleet was 25 MiB of heap.
const settleEvery = 2 * time.Second

// settleBudget bounds the time of one settle pass: a backlog (a burst of
// old rollouts, the first start after an upgrade) is settled in slices
// settleSoon apart, between batches, instead of holding them up.
const (
	settleBudget = 2 * time.Millisecond
	settleSoon   = 20 * time.Millisecond
)

// Engine owns the model. Observations are applied in batches by a leader:
// the submitter that finds no batch under way takes every queued request,
// applies them together, commits the step in one store transaction (group
// commit), and only then answers them all. An acknowledged observation is
// therefore durable, and readers see only committed state. Leading in the
// submitter's own goroutine keeps the commit path free of hand-offs to
// other goroutines, each of which would wait its turn on a busy scheduler.
type Engine struct {
	*Reader
	store Store
	now   func() time.Time

	mu      sync.Mutex // guards queue, leading and closed
	idle    *sync.Cond // signalled when leadership ends
	queue   []*request
	leading bool
	closed  bool

	// Owned by the leader.
	model  *rollout.Model
	broken bool // the model could not be restored from the store after a failed commit

	// follower: the engine of a replica that does not lead (NewFollower).
	// Of the rollouts its last settle pass would have settled, found are
	// those the archive held when asked after it (the next pass settles
	// them), heldBack those it did not.
	follower bool
	found    map[rollout.Key]bool
	heldBack map[rollout.Key]bool

	nextDue       atomic.Int64              // unix nanos of the earliest deadline, for Run's timer
	settleMore    atomic.Bool               // the last settle pass ran out of time
	rearm         chan struct{}             // tells Run an earlier deadline was armed
	notify        func()                    // told when mails were enqueued
	notifyPublish func([]rollout.Published) // told what was published
	onVerdict     func(ch rollout.VerdictChange)

	stats  Stats
	health storeHealth
}

// Stats counts what the engine did, for metrics and tests.
type Stats struct {
	Observations atomic.Int64 // submitted and committed
	Learned      atomic.Int64 // of those, ones that changed evidence
	Commits      atomic.Int64
	Settled      atomic.Int64 // rollouts settled
	Ignored      atomic.Int64 // observations about settled history
}

// request is observations to apply, or a step of the model's clock for the
// leader to run.
type request struct {
	obs  []rollout.Observation // applied in one batch, seen together
	tick func(c *rollout.Change, now time.Time)
	done chan error
}

// New loads the stored state into a model and publishes a view of every
// rollout.
func New(store Store, cfg rollout.Config, log *slog.Logger, now func() time.Time) (*Engine, error) {
	return NewOn(NewReader(store, log), store, cfg, now)
}

// NewOn is New publishing into r, whose views it replaces: a replica's
// leader answers reads from the reader it kept while following, instead
// of holding every view twice.
func NewOn(r *Reader, store Store, cfg rollout.Config, now func() time.Time) (*Engine, error) {
	return newEngine(r, store, cfg, now, false)
}

// NewFollower is NewOn for a replica that does not lead: it applies the
// same observations as the leader, in the same order, to a model of its
// own, so that it answers what it acknowledged whoever leads, and runs
// the same clock; but it commits nothing and sends nothing (its mails and
// publications are the leader's to decide), and it settles a rollout
// only once the leader's commit put it in the archive: until then the
// live view is the only answer there is. store is read, never written.
func NewFollower(r *Reader, store Store, cfg rollout.Config, now func() time.Time) (*Engine, error) {
	return newEngine(r, store, cfg, now, true)
}

func newEngine(r *Reader, store Store, cfg rollout.Config, now func() time.Time, follower bool) (*Engine, error) {
	model, err := rollout.NewModel(cfg)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		Reader: r,
		store:  store, now: now, model: model,
		rearm:    make(chan struct{}, 1),
		follower: follower,
	}
	e.idle = sync.NewCond(&e.mu)
	if err := e.load(); err != nil {
		return nil, err
	}
	// Collect garbage and settle before serving; a failure is logged and
	// retried by Run.
	c := &rollout.Change{}
	t := now()
	e.collectGarbage(c, t)
	e.settle(c, t)
	_ = e.write(c)
	return e, nil
}

// OnMail sets a function called after a commit that enqueued mails (the
// outbox dispatcher's wake-up). Call it before Run.
func (e *Engine) OnMail(f func()) { e.notify = f }

// OnPublish sets a function called with what a commit published to the
// channels' outboxes (their dispatchers' wake-up: each takes some). Call
// it before Run.
func (e *Engine) OnPublish(f func([]rollout.Published)) { e.notifyPublish = f }

// told wakes the dispatchers of what c committed.
func (e *Engine) told(c *rollout.Change) {
	if len(c.Mails) > 0 && e.notify != nil {
		e.notify()
	}
	if len(c.Published) > 0 && e.notifyPublish != nil {
		e.notifyPublish(c.Published)
	}
}

// OnVerdict sets a function called, after the commit, for each rollout
// whose verdict changed (metrics). Call it before Run.
func (e *Engine) OnVerdict(f func(ch rollout.VerdictChange)) { e.onVerdict = f }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Submit hands an observation to the engine and returns once it is stored
// (nil), could not be stored (ErrStore), or ctx ended first.
func (e *Engine) Submit(ctx context.Context, o rollout.Observation) error {
	return e.SubmitAll(ctx, []rollout.Observation{o})
}

// SubmitAll stores observations that belong together in one batch: no
// reader ever sees some of them without the others. The cluster reader
// uses it for the membership marks of all layers of a source, so that a
// rollout is never judged on part of its expected layers.
func (e *Engine) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	if len(obs) == 0 {
		return nil
	}
	for i := range obs {
		// Normalise reads only the configuration, which never changes.
		if err := e.model.Normalise(&obs[i]); err != nil {
			return err
		}
	}
	return e.do(ctx, &request{obs: obs, done: make(chan error, 1)})
}

// SubmitEach stores each group of observations as SubmitAll does, all in
// as few batches as they fit, and returns each group's outcome: a replica
// taking many groups from its shared inbox at once.
func (e *Engine) SubmitEach(ctx context.Context, groups [][]rollout.Observation) []error {
	errs := make([]error, len(groups))
	reqs := make([]*request, 0, len(groups))
	at := make([]int, 0, len(groups))
	for i, obs := range groups {
		for j := range obs {
			if err := e.model.Normalise(&obs[j]); err != nil {
				errs[i] = err
				break
			}
		}
		if errs[i] == nil && len(obs) > 0 {
			reqs = append(reqs, &request{obs: obs, done: make(chan error, 1)})
			at = append(at, i)
		}
	}
	for i, err := range e.doAll(ctx, reqs) {
		errs[at[i]] = err
	}
	return errs
}

// Settle runs a settle pass now, as Run does every few seconds.
func (e *Engine) Settle(ctx context.Context) error {
	return e.do(ctx, &request{tick: e.settle, done: make(chan error, 1)})
}

// do queues a request, leads the batch when none is under way, and waits
// for the request's answer.
func (e *Engine) do(ctx context.Context, req *request) error {
	if !e.enqueue(req) {
		return ErrStopped
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enqueue queues requests together and leads when no batch is under way;
// false when the engine has stopped.
func (e *Engine) enqueue(reqs ...*request) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.queue = append(e.queue, reqs...)
	lead := !e.leading
	e.leading = true
	e.mu.Unlock()
	if lead {
		e.lead()
	}
	return true
}

// doAll is do of requests queued together.
func (e *Engine) doAll(ctx context.Context, reqs []*request) []error {
	errs := make([]error, len(reqs))
	if len(reqs) == 0 {
		return errs
	}
	if !e.enqueue(reqs...) {
		for i := range errs {
			errs[i] = ErrStopped
		}
		return errs
	}
	for i, req := range reqs {
		select {
		case errs[i] = <-req.done:
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
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

// Run marks the engine ready and runs the model's clock until ctx ends:
// rollouts turn stuck at their deadline, settle, and are garbage-collected.
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
	settle := time.NewTimer(e.untilSettle(nil))
	defer settle.Stop()
	timer := time.NewTimer(e.untilDue())
	defer timer.Stop()
	tick := func(f func(*rollout.Change, time.Time), what string) error {
		err := e.do(ctx, &request{tick: f, done: make(chan error, 1)})
		// A failing store is logged once an episode, by process.
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrStore) {
			e.log.Warn(what, "err", err)
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.rearm:
		case <-timer.C:
			tick(e.model.Expire, "turn rollouts stuck")
		case <-gc.C:
			tick(e.collectGarbage, "garbage-collect rollouts")
		case <-settle.C:
			settle.Reset(e.untilSettle(tick(e.settle, "settle rollouts")))
		}
		timer.Reset(e.untilDue())
	}
}

// untilSettle is how long until the next settle pass: soon when the last
// one (whose commit returned err) ran out of time, unless its commit
// failed, which restored the state from the store: not that again in
// settleSoon.
func (e *Engine) untilSettle(err error) time.Duration {
	if err == nil && e.settleMore.Load() {
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

// process applies a batch to the model, runs its clock steps, commits the
// whole step in one transaction and answers every request in it.
func (e *Engine) process(batch []*request) {
	err := e.step(batch)
	// A follower's store errors are reads of the archive, said by the
	// replica that feeds it: not commits.
	if errors.Is(err, ErrStore) && !e.follower {
		e.health.failed(err, e.now(), e.log)
	}
	e.answer(batch, err)
}

func (e *Engine) step(batch []*request) error {
	if e.broken {
		if err := e.load(); err != nil {
			return fmt.Errorf("%w: restore the state after a failed commit: %v", ErrStore, err)
		}
	}
	now := e.now()
	var obs [][]rollout.Observation
	for _, req := range batch {
		if len(req.obs) > 0 {
			obs = append(obs, req.obs)
		}
	}
	c := &rollout.Change{}
	if len(obs) > 0 {
		var settled map[rollout.Key]bool
		if keys := e.ask(obs); len(keys) > 0 {
			var err error
			if settled, err = e.store.SettledAmong(keys); err != nil {
				return fmt.Errorf("%w: %v", ErrStore, err)
			}
		}
		learned, ignored := e.model.Apply(c, obs, settled, now)
		e.stats.Learned.Add(int64(learned))
		e.stats.Ignored.Add(int64(ignored))
	}
	for _, req := range batch {
		if req.tick != nil {
			req.tick(c, now)
		}
	}
	e.model.Verify()
	return e.write(c)
}

// ask lists the rollouts observations name whose settling the archive
// must be asked about: those memory does not hold, and on a follower
// those it holds back until the archive has them, which the leader,
// having settled them, ignores observations of.
func (e *Engine) ask(obs [][]rollout.Observation) []rollout.Key {
	keys := e.model.Unknown(obs)
	if len(e.heldBack) == 0 {
		return keys
	}
	seen := map[rollout.Key]bool{}
	for _, group := range obs {
		for i := range group {
			if k := (rollout.Key{Cluster: group[i].Cluster, Hash: group[i].Hash}); e.heldBack[k] && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// write commits c and publishes what it decided; on failure it restores
// the model from the store, so that nothing unstored is ever acknowledged.
// A follower's engine only publishes: the leader commits the same.
func (e *Engine) write(c *rollout.Change) error {
	if e.follower {
		e.snap.publish(c.Views, c.Forget, false)
		e.armDeadline()
		return nil
	}
	if !c.Empty() {
		c.At = e.now()
		if err := e.store.Commit(&c.Batch); err != nil {
			// Restored here, or by the next batch when this fails too;
			// either way the failure is the commit's, logged once an
			// episode by process.
			_ = e.load()
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
		// Only a commit ends an episode: a batch that wrote nothing
		// proves nothing about the store.
		e.health.succeeded(e.now, e.log)
		e.stats.Commits.Add(1)
		e.stats.Settled.Add(int64(len(c.Settle)))
	}
	for _, ch := range c.Verdicts {
		from := "none"
		if !ch.New {
			from = ch.From.String()
		}
		e.log.Info("rollout verdict", "cluster", ch.View.Cluster, "revision", ch.View.Revision,
			"verdict", ch.View.Verdict.String(), "from", from, "summary", ch.View.Summary)
		if e.onVerdict != nil {
			e.onVerdict(ch)
		}
	}
	e.snap.publish(c.Views, c.Forget, false)
	e.armDeadline()
	e.told(c)
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

// armDeadline tells Run when the next rollout may turn stuck.
func (e *Engine) armDeadline() {
	var next int64
	if t := e.model.NextDeadline(); !t.IsZero() {
		next = t.UnixNano()
	}
	if old := e.nextDue.Swap(next); next != 0 && (old == 0 || next < old) {
		select {
		case e.rearm <- struct{}{}:
		default:
		}
	}
}

// load rebuilds the model from the store and publishes every view.
func (e *Engine) load() error {
	e.broken = true // until the load below succeeds
	c, err := e.model.Load(e.store, e.now())
	if err != nil {
		return err
	}
	e.broken = false
	e.model.Verify()
	e.snap.publish(c.Views, nil, true)
	e.armDeadline()
	if !e.follower && (len(c.Mails) > 0 || len(c.Published) > 0) {
		// Stuck mails that came due while no commit could decide them, and
		// verdicts for the forge outbox, which keeps those it has.
		if err := e.store.Commit(&rollout.Batch{Mails: c.Mails, Published: c.Published, At: e.now()}); err != nil {
			e.model.Unmail(c.Mails) // decided again at the next evaluation
			// The verdicts only a reload publishes: the next batch reloads.
			e.broken = len(c.Published) > 0
			e.health.failed(fmt.Errorf("enqueue stuck mails and verdicts for the forge: %w", err), e.now(), e.log)
		} else {
			e.told(c)
		}
	}
	return nil
}

// settle runs one settle pass of the model, for at most settleBudget; a
// follower's settles only what the archive holds.
func (e *Engine) settle(c *rollout.Change, now time.Time) {
	start := e.now()
	var (
		archived func(rollout.Key) bool
		asked    []rollout.Key
	)
	if e.follower {
		archived = func(k rollout.Key) bool {
			if e.found[k] {
				return true
			}
			asked = append(asked, k)
			return false
		}
	}
	n, more := e.model.SettleWhere(c, now, func() bool { return e.now().Sub(start) > settleBudget }, archived)
	if e.follower {
		e.askArchive(asked)
	}
	e.settleMore.Store(more)
	if n > 0 {
		e.log.Debug("settling rollouts", "count", n, "more", more)
	}
}

// askArchive asks the archive, after a follower's settle pass, which of
// the rollouts the pass held back it holds: the next pass settles those
// (found); the others stay held back, and observations of them are
// checked against the archive (ask). One question a pass, of those alone
// the model would settle. When the archive cannot be read, none is found.
func (e *Engine) askArchive(asked []rollout.Key) {
	found := map[rollout.Key]bool{}
	if len(asked) > 0 {
		var err error
		if found, err = e.store.SettledAmong(asked); err != nil {
			e.log.Debug("follower: ask the archive what settled", "err", err)
			found = map[rollout.Key]bool{}
		}
	}
	e.heldBack = make(map[rollout.Key]bool, len(asked)-len(found))
	for _, k := range asked {
		if !found[k] {
			e.heldBack[k] = true
		}
	}
	e.found = found
}

// collectGarbage runs the model's retention.
func (e *Engine) collectGarbage(c *rollout.Change, now time.Time) {
	if n := e.model.CollectGarbage(c, now); n > 0 {
		e.log.Info("garbage-collecting rollouts", "count", n, "retention", e.model.Retention().String())
	}
}
