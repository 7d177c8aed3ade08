package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// shared is the way of replicas on one PostgreSQL database
// (store.Coordination): the lease is a row every replica campaigns for;
// each replica appends what it takes to the inbox, a log every replica
// reads in one order: the leader into its engine, which commits and
// sends, the others into engines of their own, which only show
// (following). The leader also writes the views its commits changed, for
// the followers of the release before, which follow those. It embeds the
// replica whose way it is: its episodes, reader and configuration are
// the replica's.
type shared struct {
	*Node
	co *store.Coordination
	sw following
}

// following hands the reader over between this replica's follower and
// the engine of a term it begins: the follower stops (yield) before the
// leader's engine loads, and starts again once the term ended.
type following struct {
	mu     sync.Mutex
	stop   context.CancelFunc // of the follower under way, nil when none
	done   chan struct{}      // closed when it stopped
	resume chan struct{}      // a term ended
}

// start waits until this replica does not lead and returns the context
// of a follower, ended by yield, and what to call when it stopped.
func (f *following) start(ctx context.Context, leading func() bool) (context.Context, func(), bool) {
	for ctx.Err() == nil {
		f.mu.Lock()
		if !leading() {
			fctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			f.stop, f.done = stop, done
			f.mu.Unlock()
			return fctx, func() { stop(); close(done) }, true
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-f.resume:
		}
	}
	return nil, nil, false
}

// yield stops the follower under way and waits until it did: leading is
// already true, so that no other starts.
func (f *following) yield() {
	f.mu.Lock()
	stop, done := f.stop, f.done
	f.stop, f.done = nil, nil
	f.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// resumed says that a term ended.
func (f *following) resumed() {
	select {
	case f.resume <- struct{}{}:
	default:
	}
}

func (n *shared) yield()   { n.sw.yield() }
func (n *shared) resumed() { n.sw.resumed() }

func (n *shared) Campaign(ctx context.Context, holder string, ttl time.Duration) (store.Lease, bool, error) {
	return n.co.Campaign(ctx, holder, ttl)
}
func (n *shared) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (bool, error) {
	return n.co.Renew(ctx, l, ttl)
}
func (n *shared) Resign(ctx context.Context, l store.Lease) error { return n.co.Resign(ctx, l) }
func (n *shared) Fence(l *store.Lease)                            { n.co.Fence(l) }
func (n *shared) ping(ctx context.Context) error                  { return n.co.Ping(ctx) }
func (n *shared) alone() bool                                     { return false }

func (n *shared) collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_inbox_depth",
		Help: "Events acknowledged by a replica that the leader has not taken into its engine yet (PostgreSQL).",
	}, func() float64 {
		d, _ := n.co.InboxDepth(context.Background())
		return float64(d)
	})}
}

// submit appends observations that belong together to the inbox and
// returns once they are committed (nil: acknowledge them), refused
// (rollout.ErrInvalid) or not stored (engine.ErrStore: retry).
func (n *shared) submit(ctx context.Context, obs []rollout.Observation, event bool, fence *store.ClusterLease) error {
	for i := range obs {
		if err := n.normalise(&obs[i]); err != nil {
			return err
		}
	}
	if err := n.co.Append(ctx, obs, event, fence); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, store.ErrClusterFenced) {
			return err // not a failing store: the reader's lease is over
		}
		now := time.Now()
		n.appends.Add(1)
		n.lastFail.Store(now.UnixNano())
		n.failed(&n.appendEp, now, err, "storing events in PostgreSQL fails: they are answered 503 (notification-controller retries them)")
		return fmt.Errorf("%w: %v", engine.ErrStore, err)
	}
	n.succeeded(&n.appendEp, "storing events in PostgreSQL succeeds again")
	return nil
}

// begin returns what takes the inbox into e, the engine of a term that
// begins, until the term ends. It writes no views: every follower of this
// release and of the two before it applies the inbox to an engine of its
// own (followLog). A leader of 8ec1646 and earlier wrote each commit's
// views, as wide as their rollouts, for its followers to read
// (followViews, still read under such a leader); a replica of those
// releases is updated to one of 90c51c0 or later first.
func (n *shared) begin(e *engine.Engine) ([]func(context.Context), error) {
	return []func(context.Context){func(ctx context.Context) { n.pump(ctx, e) }}, nil
}

// follow shows this replica the rollouts while it does not lead: from an
// engine of its own that applies the inbox as the leader's does
// (followLog), so that what it acknowledged shows in its answers within
// the inbox's round trip whoever leads, and while no replica does; or,
// under a leader of a release that does not keep the inbox for its
// readers, from the views that leader writes (followViews).
func (n *shared) follow(ctx context.Context) {
	for {
		fctx, stopped, ok := n.sw.start(ctx, n.leading.Load)
		if !ok {
			return
		}
		n.caughtUp.Store(false)
		st, err := n.co.Log(fctx)
		switch {
		case fctx.Err() != nil:
		case err != nil:
			n.followFailed(err, "reading the inbox")
			sleep(fctx, n.cfg.Poll)
		case st.Kept():
			n.followLog(fctx, st)
		default:
			n.followViews(fctx)
		}
		stopped()
	}
}

// followFailed says, once an episode, that what a follower does fails.
func (n *shared) followFailed(err error, what string) {
	n.failed(&n.followEp, time.Now(), err, what+" from PostgreSQL fails: this replica shows the rollouts as they were")
}

// followViews keeps the reader's views those the store has: all of them
// first, then their changes, woken by the leader's notifications and at
// least every Poll, until ctx ends or the lease's term keeps the log.
func (n *shared) followViews(ctx context.Context) {
	w := n.wakeups("fdn_views")
	defer w.close()
	var version int64
	for ctx.Err() == nil {
		w.listen(ctx)
		version = n.catchUp(ctx, version)
		if st, err := n.co.Log(ctx); err == nil && st.Kept() {
			return
		}
		w.wait(ctx)
	}
}

// followLog applies the inbox to an engine of this replica's own
// (engine.NewFollower) until ctx ends, or until it cannot go on from
// where it read: entries it did not read were trimmed (it was not seen
// for a lease's duration), or a term began that it cannot tell kept the
// log. follow then loads again. It starts where the inbox is trimmed,
// says so (store.Read), and only then loads the engine: every entry up to
// that mark is in what it loads (the leader trims only what it
// committed), and an entry after it that is too is applied again, which
// changes nothing. It says how far it read every Renew, well within the
// lease's duration the leader keeps entries for a reader seen.
func (n *shared) followLog(ctx context.Context, st store.LogState) {
	at := st.Trimmed
	if err := n.co.Read(ctx, n.cfg.Identity, at); err != nil {
		if ctx.Err() == nil {
			n.followFailed(err, "reading the inbox")
			sleep(ctx, n.cfg.Poll)
		}
		return
	}
	e, err := n.newFollower()
	if err != nil {
		if ctx.Err() == nil {
			n.followFailed(err, "loading the rollouts")
			sleep(ctx, n.cfg.Poll)
		}
		return
	}
	ectx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(ectx) })
	defer func() {
		stop()
		wg.Wait()
	}()
	w := n.wakeups("fdn_inbox")
	defer w.close()
	said := time.Now()
	for ctx.Err() == nil {
		w.listen(ctx)
		page, err := n.co.Tail(ctx, at, tailLimit)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			n.followFailed(err, "reading the inbox")
			n.caughtUp.Store(false)
			w.wait(ctx)
			continue
		case at.Before(page.Log.Trimmed):
			n.log.Warn("the inbox was trimmed past where this replica read: loading the rollouts again")
			return
		case !page.Log.Kept() || page.Log.Epoch > st.Epoch+1:
			// A term of a leader that may not keep the log, under way or
			// between two reads.
			return
		}
		st = page.Log
		taken, err := n.apply(ctx, e, page.Entries, false)
		if taken > 0 {
			at = page.Entries[taken-1].Pos
		}
		if err != nil {
			if ctx.Err() == nil {
				n.followFailed(err, "applying the inbox")
				n.caughtUp.Store(false)
				w.wait(ctx)
			}
			continue
		}
		n.succeeded(&n.followEp, "reading the inbox from PostgreSQL succeeds again")
		if time.Since(said) >= n.cfg.Renew {
			if err := n.co.Read(ctx, n.cfg.Identity, at); err == nil {
				said = time.Now()
			}
		}
		switch {
		case len(page.Entries) == tailLimit:
			continue
		case page.Held:
			n.caughtUp.Store(true)
			sleep(ctx, reread)
			continue
		}
		n.caughtUp.Store(true)
		w.wait(ctx)
	}
}

// wakeups are the notifications on one channel, or, while it cannot be
// listened to, a poll: a loop listens before it reads what changed, then
// waits.
type wakeups struct {
	co      *store.Coordination
	channel string
	poll    time.Duration
	l       *store.Listener
}

func (n *shared) wakeups(channel string) *wakeups {
	return &wakeups{co: n.co, channel: channel, poll: n.cfg.Poll}
}

// listen listens unless it does: before the read, so that a change after
// it wakes the wait.
func (w *wakeups) listen(ctx context.Context) {
	if w.l == nil {
		w.l, _ = w.co.Listen(ctx, w.channel) // nil: polled until it can listen again
	}
}

// wait returns at a notification, after the poll, or when ctx ends.
func (w *wakeups) wait(ctx context.Context) {
	if w.l == nil {
		sleep(ctx, w.poll)
		return
	}
	if _, err := w.l.Wait(ctx, w.poll); err != nil && ctx.Err() == nil {
		w.close() // notifications sent meanwhile are lost: the next read finds their changes
	}
}

func (w *wakeups) close() {
	if w.l != nil {
		w.l.Close()
		w.l = nil
	}
}

// catchUp shows the views' changes since version and returns the version
// shown: 0 while this replica leads, since its engine shows its own views
// (newer than any read here), so that all are read again after the term.
func (n *shared) catchUp(ctx context.Context, version int64) int64 {
	if n.leading.Load() {
		return 0
	}
	ch, err := n.co.ViewsSince(ctx, version)
	n.shown.Lock()
	defer n.shown.Unlock()
	switch {
	case n.leading.Load():
		return 0
	case ctx.Err() != nil:
		return version
	case err != nil:
		n.failed(&n.followEp, time.Now(), err, "reading the rollouts from PostgreSQL fails: this replica shows them as they were")
		n.caughtUp.Store(false)
		n.reader.SetReady(false)
		return version
	}
	n.succeeded(&n.followEp, "reading the rollouts from PostgreSQL succeeds again")
	n.reader.Publish(ch.Views, ch.Removed, ch.Reset)
	n.caughtUp.Store(true)
	n.reader.SetReady(true)
	return ch.Version
}

// pump takes the inbox into e until ctx ends: the leader's half of every
// replica's SubmitAll. It reads the inbox in its order (store.Tail) from
// where it is trimmed, and takes an entry once its observations are
// committed, or refused (they were checked when appended: a refusal here
// is of a binary that checks more, and a retry cannot pass); it then
// trims what it took and every live reader read. A leader that dies
// between the two leaves the entry to the next, which applies it again:
// applying is idempotent. An entry this binary cannot read (a newer
// one's, during an update) stays, and holds up those after it until a
// replica that reads it leads: said once in the log and on /readyz.
func (n *shared) pump(ctx context.Context, e *engine.Engine) {
	// Gather what arrives meanwhile: fewer, larger commits.
	const linger = 10 * time.Millisecond
	w := n.wakeups("fdn_inbox")
	vacuums := []*vacuum{
		{tables: []store.Table{store.TableInbox}, after: 20000, every: 5 * time.Second},
		{tables: []store.Table{store.TableKV, store.TableViews}, after: 100000, every: 30 * time.Second},
	}
	var forget sync.WaitGroup
	forget.Go(func() { n.forgetReaders(ctx) })
	defer func() {
		w.close()
		for _, v := range vacuums {
			v.wg.Wait()
		}
		forget.Wait()
		n.pumpEp.Ok() // a warning of this term's
	}()
	var (
		at      store.Position // how far the engine has the inbox
		start   = true         // at is not read yet
		trimmed store.Position // how far the last trim went
		when    time.Time      // and when
	)
	for ctx.Err() == nil {
		w.listen(ctx)
		var (
			page store.Page
			err  error
		)
		if start {
			at, err = n.co.Trimmed(ctx)
			start = err != nil
		}
		if err == nil {
			page, err = n.co.Tail(ctx, at, tailLimit)
		}
		entries := page.Entries
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			n.failed(&n.pumpEp, time.Now(), err, "taking the events from the inbox fails: they wait there")
		default:
			n.succeeded(&n.pumpEp, "taking the events from the inbox succeeds again")
		}
		if err == nil && len(entries) > 0 {
			var taken int
			if taken, err = n.apply(ctx, e, entries, true); taken > 0 {
				// A failure to trim is the next one's to make up: it
				// trims up to where the pump is.
				at = entries[taken-1].Pos
				var terr error
				if trimmed, terr = n.co.Trim(ctx, at, n.cfg.LeaseTTL); terr == nil {
					when = time.Now()
					for _, v := range vacuums {
						v.taken(ctx, n, taken)
					}
				}
			}
			if err == nil {
				if len(entries) < tailLimit {
					// Gather what arrives meanwhile: fewer, larger commits,
					// each a flush of the log the replicas' appends wait
					// on too (ack p99 at 1,000 events/s: make bench).
					sleep(ctx, linger)
				}
				continue // more may wait
			}
		}
		if err == nil && page.Held {
			sleep(ctx, reread)
			continue
		}
		w.wait(ctx)
		if !start && trimmed.Before(at) && time.Since(when) >= n.cfg.Renew {
			// A reader held the last trim back: once it read on (it
			// says so every Renew), or went (not seen for a lease), what
			// it held goes too, even when no event comes to trim again.
			if t, err := n.co.Trim(ctx, at, n.cfg.LeaseTTL); err == nil {
				trimmed, when = t, time.Now()
			}
		}
	}
}

// forgetReaders deletes the rows of readers gone for ten leases, when a
// term begins and with each vacuum of the inbox: they pile up with the
// restarts, not with the events.
func (n *shared) forgetReaders(ctx context.Context) {
	if err := n.co.ForgetReaders(ctx, 10*n.cfg.LeaseTTL); err != nil && ctx.Err() == nil {
		n.log.Warn("forget the inbox's readers gone", "err", err)
	}
}

// apply submits entries to e and returns how many of the first ones it
// took (applied, or refused), and an error when the one after them was
// not: the next read starts there. The leader's (lead) counts the events
// for the watchdog and says what it refused; a follower's engine refuses
// the same, silently.
func (n *shared) apply(ctx context.Context, e *engine.Engine, entries []store.Entry, lead bool) (int, error) {
	groups := make([][]rollout.Observation, len(entries))
	for i, en := range entries {
		groups[i] = en.Observations
	}
	for i, err := range e.SubmitEach(ctx, groups) {
		switch {
		case err == nil:
			if en := entries[i]; lead && en.Event && n.onEvent != nil && len(en.Observations) > 0 {
				n.onEvent(en.Observations[0].Cluster)
			}
		case errors.Is(err, rollout.ErrInvalid):
			if lead {
				n.log.Warn("inbox entry refused", "id", entries[i].ID, "err", err)
			}
		default:
			return i, err
		}
	}
	return len(entries), nil
}

const (
	// tailLimit is how many entries of the inbox are read at once.
	tailLimit = 2048
	// reread: entries committed behind a transaction still running (a
	// commit, another replica's append) are read again this soon.
	reread = time.Millisecond
)

// vacuum vacuums tables once after entries were taken, at most every
// every, one at a time, outside the pump (store.DB.Vacuum).
type vacuum struct {
	tables  []store.Table
	after   int
	every   time.Duration
	count   int       // entries taken since the last
	last    time.Time // when it began
	running atomic.Bool
	wg      sync.WaitGroup
}

func (v *vacuum) taken(ctx context.Context, n *shared, entries int) {
	v.count += entries
	if v.count < v.after || time.Since(v.last) < v.every || !v.running.CompareAndSwap(false, true) {
		return
	}
	v.count, v.last = 0, time.Now()
	v.wg.Go(func() {
		defer v.running.Store(false)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if slices.Contains(v.tables, store.TableInbox) {
			n.forgetReaders(ctx)
		}
		if err := n.co.Vacuum(ctx, v.tables...); err != nil && ctx.Err() == nil {
			n.log.Warn("vacuum", "tables", v.tables, "err", err)
		}
	})
}
