// Package replica runs one of several replicas on one PostgreSQL store.
// Every replica takes events (it appends them to the store's inbox and
// answers once they are committed) and answers reads (from the live views
// the leader's commits wrote, which it follows). One replica at a time
// leads: it holds the lease, takes the inbox into its engine, and does
// what must happen once (sending, forge delivery, the model's clock), each
// of its writes fenced by the lease's epoch.
package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/episode"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// Config times the lease and the following.
type Config struct {
	// Identity names this replica in the lease; unique per process.
	Identity string
	// LeaseTTL is how long a lease lasts unless renewed: a dead leader's
	// successor takes over within LeaseTTL and Renew of its death.
	LeaseTTL time.Duration
	// Renew is how often the leader renews and the others campaign.
	Renew time.Duration
	// Poll is how often the views and the inbox are read when no
	// notification came: a notification is only a wake-up.
	Poll time.Duration
}

// Defaults: a takeover within 15 seconds of a leader's death.
const (
	DefaultLeaseTTL = 10 * time.Second
	DefaultRenew    = 2 * time.Second
	DefaultPoll     = time.Second
)

// Identity is this process's name among the replicas: the pod's name
// (POD_NAME) or the host's, with the process id and a random suffix, so
// that a restarted container never takes its predecessor's term.
func Identity(getenv func(string) string) string {
	name := getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", name, os.Getpid(), hex.EncodeToString(b[:]))
}

// Lead runs what the leader does until ctx ends (its term is over); it
// returns once everything it started has stopped writing.
type Lead func(ctx context.Context) error

// Node is one replica.
type Node struct {
	db        *store.DB           // the records
	co        *store.Coordination // the lease, the inbox, the views
	cfg       Config
	log       *slog.Logger
	reader    *engine.Reader
	normalise func(*rollout.Observation) error
	onEvent   func()

	// shown guards what shows in reader: the views followed, or while
	// this replica leads, its engine's (which publishes into reader).
	shown    sync.Mutex
	leading  atomic.Bool
	caughtUp atomic.Bool
	current  atomic.Pointer[engine.Engine] // the leader's engine, during its term
	epoch    atomic.Int64                  // of the term under way, 0 when following

	appends  atomic.Int64 // failed appends since start
	lastFail atomic.Int64 // unix nanos of the last
	appendEp episode.Tracker
	followEp episode.Tracker
	electEp  episode.Tracker
	pumpEp   episode.Tracker
	viewEp   episode.Tracker
}

// New returns a replica on db and its coordination co. normalise checks an observation before it
// is appended (the model's own check, so that the inbox holds nothing the
// leader would refuse).
func New(db *store.DB, co *store.Coordination, cfg Config, normalise func(*rollout.Observation) error, log *slog.Logger) (*Node, error) {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Renew == 0 {
		cfg.Renew = DefaultRenew
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Renew*2 > cfg.LeaseTTL {
		return nil, fmt.Errorf("the lease (%s) must last at least two renewals (%s)", cfg.LeaseTTL, cfg.Renew)
	}
	co.RequireLease()
	return &Node{db: db, co: co, cfg: cfg, log: log, reader: engine.NewReader(db, log), normalise: normalise}, nil
}

// Reader is what this replica answers reads from.
func (n *Node) Reader() *engine.Reader { return n.reader }

// Reads answers reads on this replica: the live rollouts from the views
// it follows, the settled ones from the store, the counters of the engine
// while it leads (api.Rollouts).
func (n *Node) Reads() *Reads { return &Reads{Reader: n.reader, n: n} }

// Reads is Node.Reads.
type Reads struct {
	*engine.Reader
	n     *Node
	stats engine.Stats // a follower's: it commits nothing
}

// Stats are the leader's engine's counters while this replica leads.
func (r *Reads) Stats() *engine.Stats {
	if e := r.n.current.Load(); e != nil {
		return e.Stats()
	}
	return &r.stats
}

// CommitFailures are this replica's failed appends and, while it leads,
// its engine's failed commits; with the time of the last.
func (r *Reads) CommitFailures() (int64, time.Time) {
	n, at := r.n.AppendFailures()
	if e := r.n.current.Load(); e != nil {
		m, eat := e.CommitFailures()
		n += m
		if eat.After(at) {
			at = eat
		}
	}
	return n, at
}

// LeaderGauge is fdn_leader: 1 while leading says so.
func LeaderGauge(leading func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_leader",
		Help: "1 on the replica that sends mail, delivers to the forge and runs the rollouts' clock; 0 on the others. One process on bbolt always leads.",
	}, func() float64 {
		if leading() {
			return 1
		}
		return 0
	})
}

// RegisterMetrics registers this replica's gauges: fdn_leader, and
// fdn_inbox_depth (the events acknowledged that no leader took yet).
func (n *Node) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(LeaderGauge(n.Leading), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_inbox_depth",
		Help: "Events acknowledged by a replica that the leader has not taken into its engine yet (PostgreSQL).",
	}, func() float64 {
		d, _ := n.co.InboxDepth(context.Background())
		return float64(d)
	}))
}

// Role is this replica's part, as /readyz says it.
func (n *Node) Role() string {
	if n.Leading() {
		return "leader"
	}
	return "follower"
}

// StoreWarning says what fails of the store on this replica, the leader's
// commits included.
func (n *Node) StoreWarning() string {
	if w := n.Warning(); w != "" {
		return w
	}
	if e := n.current.Load(); e != nil {
		return e.StoreWarning()
	}
	return ""
}

// Leading reports whether this replica leads now.
func (n *Node) Leading() bool { return n.leading.Load() }

// Epoch is the term this replica leads, 0 when it follows.
func (n *Node) Epoch() int64 { return n.epoch.Load() }

// CaughtUp reports whether this replica shows the views as the store has
// them: it leads (its engine's views are the store's), or it read them
// once since it started, or since its term ended, and reads their changes.
func (n *Node) CaughtUp() bool { return n.leading.Load() || n.caughtUp.Load() }

// Answering reports whether this replica can answer every read and take
// events: it shows the views as the store has them, and PostgreSQL
// answers within pingTimeout. Leading is not enough: a leader whose
// database restarts answers the commits under way from memory, but
// neither takes events nor reads what settled, and /readyz says so.
func (n *Node) Answering() bool {
	if !n.CaughtUp() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	return n.co.Ping(ctx) == nil
}

// pingTimeout bounds Answering's question to PostgreSQL: well within a
// readiness probe's timeout.
const pingTimeout = 500 * time.Millisecond

// SubmitAll appends observations that belong together to the inbox and
// returns once they are committed (nil: acknowledge them), refused
// (rollout.ErrInvalid) or not stored (engine.ErrStore: retry).
func (n *Node) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	return n.submit(ctx, obs, false)
}

func (n *Node) submit(ctx context.Context, obs []rollout.Observation, event bool) error {
	for i := range obs {
		if err := n.normalise(&obs[i]); err != nil {
			return err
		}
	}
	if err := n.co.Append(ctx, obs, event); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
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

// AppendFailures is how many appends failed since start, and when last.
func (n *Node) AppendFailures() (int64, time.Time) {
	var at time.Time
	if ns := n.lastFail.Load(); ns != 0 {
		at = time.Unix(0, ns)
	}
	return n.appends.Load(), at
}

// Warning says, while the store fails this replica, since when and why.
func (n *Node) Warning() string {
	for _, ep := range []*episode.Tracker{&n.appendEp, &n.followEp, &n.electEp, &n.viewEp} {
		if since, _, why := ep.UnderWay(); !since.IsZero() {
			return fmt.Sprintf("PostgreSQL fails since %s: %s", since.UTC().Format(time.RFC3339), why)
		}
	}
	if since, _, why := n.pumpEp.UnderWay(); !since.IsZero() {
		return fmt.Sprintf("the leader cannot take the events from the inbox since %s: %s", since.UTC().Format(time.RFC3339), why)
	}
	return ""
}

// Run follows the views and campaigns for the lease until ctx ends; while
// this replica leads, lead runs. On return the lease, if held, is given
// up, so that another replica takes over at once.
func (n *Node) Run(ctx context.Context, lead Lead) error {
	var wg sync.WaitGroup
	wg.Go(func() { n.follow(ctx) })
	n.elect(ctx, lead)
	wg.Wait()
	return nil
}

// follow keeps the reader's views those the store has: all of them first,
// then their changes, woken by the leader's notifications and at least
// every Poll.
func (n *Node) follow(ctx context.Context) {
	w := n.wakeups("fdn_views")
	defer w.close()
	var version int64
	for ctx.Err() == nil {
		w.listen(ctx)
		version = n.catchUp(ctx, version)
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

func (n *Node) wakeups(channel string) *wakeups {
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
func (n *Node) catchUp(ctx context.Context, version int64) int64 {
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

// elect drives the election (election.go): it asks PostgreSQL every
// Renew, tells the election what came back and when the term's timer
// fired or leading stopped, and does what it says.
func (n *Node) elect(ctx context.Context, lead Lead) {
	e := &election{ttl: n.cfg.LeaseTTL, renew: n.cfg.Renew}
	var t *term
	// Signalled by the term's timer when it runs out, or by its work when
	// leading stops on its own.
	expired, stopped := make(chan struct{}, 1), make(chan struct{}, 1)
	var do func(actions []action)
	do = func(actions []action) {
		for _, a := range actions {
			switch a.do {
			case campaign, renew:
				asked := time.Now()
				rctx, cancel := context.WithTimeout(ctx, n.cfg.Renew)
				in := input{what: answered, renewal: a.do == renew, asked: asked, lease: a.lease}
				if a.do == campaign {
					in.lease, in.ok, in.err = n.co.Campaign(rctx, n.cfg.Identity, n.cfg.LeaseTTL)
				} else {
					in.ok, in.err = n.co.Renew(rctx, a.lease, n.cfg.LeaseTTL)
				}
				cancel()
				if ctx.Err() != nil {
					return
				}
				if in.err != nil {
					n.failed(&n.electEp, time.Now(), in.err, "the lease cannot be read or renewed in PostgreSQL")
				} else {
					n.electOk()
				}
				in.now = time.Now()
				do(e.step(in))
			case begin:
				drain(expired)
				drain(stopped)
				t = n.begin(ctx, a.lease, lead, time.Until(a.at), expired, stopped)
			case extend:
				t.expiry.Reset(time.Until(a.at))
			case end:
				n.end(ctx, t, a.why, a.resign)
				t = nil
			}
		}
	}
	defer func() { do(e.step(input{what: stopping, now: time.Now()})) }()
	ticker := time.NewTicker(n.cfg.Renew)
	defer ticker.Stop()
	for {
		do(e.step(input{what: tick, now: time.Now()}))
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-expired:
			do(e.step(input{what: timedOut, now: time.Now()}))
		case <-stopped:
			do(e.step(input{what: leadStopped, now: time.Now()}))
		}
	}
}

// end stops term t's work and says so; with resign it gives the lease
// up, so that another replica takes over at once.
func (n *Node) end(ctx context.Context, t *term, why string, resign bool) {
	t.end()
	n.shown.Lock()
	n.leading.Store(false)
	n.caughtUp.Store(false) // until the views are read again
	n.shown.Unlock()
	n.epoch.Store(0)
	n.log.Warn("no longer leading", "epoch", t.lease.Epoch, "why", why)
	if resign {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.Renew)
		if err := n.co.Resign(rctx, t.lease); err != nil {
			n.log.Warn("give up the lease", "err", err)
		}
		cancel()
	}
}

// drain empties a signal's channel of what a term before left in it.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

func (n *Node) electOk() { n.succeeded(&n.electEp, "the lease is read again") }

// failed records a failure in ep's episode, said in the log when it
// begins one; succeeded ends the episode, said once too.
func (n *Node) failed(ep *episode.Tracker, now time.Time, err error, said string) {
	if ep.Fail(now, err.Error()) {
		n.log.Error(said, "err", err)
	}
}

func (n *Node) succeeded(ep *episode.Tracker, said string) {
	if count, since, ended := ep.Ok(); ended {
		n.log.Warn(said, "failed", count, "for", time.Since(since).Round(time.Millisecond).String())
	}
}

// term is one term of leadership under way.
type term struct {
	co     *store.Coordination
	lease  store.Lease
	stop   context.CancelFunc
	done   chan struct{}
	expiry *time.Timer // signals expired when the lease runs out unrenewed
}

// begin fences the store with lease and runs lead until the term ends;
// expired is signalled when the lease runs out (valid from now), stopped
// when lead stops on its own.
func (n *Node) begin(ctx context.Context, lease store.Lease, lead Lead, valid time.Duration, expired, stopped chan struct{}) *term {
	n.co.Fence(&lease)
	signal := func(c chan struct{}) func() {
		return func() {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	termCtx, stop := context.WithCancel(ctx)
	t := &term{co: n.co, lease: lease, stop: stop, done: make(chan struct{}), expiry: time.AfterFunc(valid, signal(expired))}
	n.shown.Lock()
	n.leading.Store(true)
	n.shown.Unlock()
	n.epoch.Store(lease.Epoch)
	n.log.Info("leading", "epoch", lease.Epoch, "identity", n.cfg.Identity)
	go func() {
		defer close(t.done)
		err := lead(termCtx)
		if termCtx.Err() == nil {
			// Leading stopped on its own: let another replica try.
			n.log.Error("leading failed; giving the lease up", "err", err)
			signal(stopped)()
		}
	}()
	return t
}

// end stops the term's work and waits for it; its writes were fenced all
// along, and the store takes none after.
func (t *term) end() {
	t.stop()
	<-t.done
	t.expiry.Stop()
	t.co.Fence(nil)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pump takes the inbox into e until ctx ends: the leader's half of every
// replica's SubmitAll. An entry is deleted once its observations are
// committed, or refused (they were checked when appended: a refusal here
// is of a binary that checks more, and a retry cannot pass). A leader that
// dies between the two leaves the entry to the next, which applies it
// again: applying is idempotent. An entry this binary cannot read (a newer
// one's, during an update) stays, and holds up those after it until a
// replica that reads it leads: said once in the log and on /readyz.
func (n *Node) pump(ctx context.Context, e *engine.Engine) {
	const (
		take   = 2048
		linger = 10 * time.Millisecond
	)
	w := n.wakeups("fdn_inbox")
	vacuums := []*vacuum{
		{tables: []store.Table{store.TableInbox}, after: 20000, every: 5 * time.Second},
		{tables: []store.Table{store.TableKV, store.TableViews}, after: 100000, every: 30 * time.Second},
	}
	defer func() {
		w.close()
		for _, v := range vacuums {
			v.wg.Wait()
		}
		n.pumpEp.Ok() // a warning of this term's
	}()
	for ctx.Err() == nil {
		w.listen(ctx)
		entries, err := n.co.Inbox(ctx, take)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			n.failed(&n.pumpEp, time.Now(), err, "taking the events from the inbox fails: they wait there")
		default:
			n.succeeded(&n.pumpEp, "taking the events from the inbox succeeds again")
		}
		if err == nil && len(entries) > 0 {
			groups := make([][]rollout.Observation, len(entries))
			for i, en := range entries {
				groups[i] = en.Observations
			}
			var done []int64
			for i, err := range e.SubmitEach(ctx, groups) {
				switch {
				case err == nil:
					done = append(done, entries[i].ID)
					if entries[i].Event && n.onEvent != nil {
						n.onEvent()
					}
				case errors.Is(err, rollout.ErrInvalid):
					n.log.Warn("inbox entry refused", "id", entries[i].ID, "err", err)
					done = append(done, entries[i].ID)
				}
			}
			if len(done) > 0 {
				if err = n.co.Consumed(ctx, done); err == nil {
					for _, v := range vacuums {
						v.taken(ctx, n, len(done))
					}
				}
			}
			if err == nil && len(done) == len(entries) {
				if len(entries) < take {
					// Gather what arrives meanwhile: fewer, larger commits,
					// each a flush of the log the replicas' appends wait
					// on too (ack p99 at 1,000 events/s: make bench).
					sleep(ctx, linger)
				}
				continue // more may wait
			}
		}
		w.wait(ctx)
	}
}

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

func (v *vacuum) taken(ctx context.Context, n *Node, entries int) {
	v.count += entries
	if v.count < v.after || time.Since(v.last) < v.every || !v.running.CompareAndSwap(false, true) {
		return
	}
	v.count, v.last = 0, time.Now()
	v.wg.Go(func() {
		defer v.running.Store(false)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := n.co.Vacuum(ctx, v.tables...); err != nil && ctx.Err() == nil {
			n.log.Warn("vacuum", "tables", v.tables, "err", err)
		}
	})
}

// LeadEngine is a Lead that runs the leader's engine for the term: it
// loads the live rollouts from the store, shows their views to every
// replica, takes the inbox into the engine and runs its clock. with, when
// set, is given the engine before it runs, and returns what else the
// leader runs with it until the term ends (the dispatchers).
func (n *Node) LeadEngine(cfg rollout.Config, now func() time.Time, with func(e *engine.Engine) []func(ctx context.Context)) Lead {
	return func(ctx context.Context) error {
		start := time.Now()
		e, err := engine.NewOn(n.reader, n.db, cfg, now)
		if err != nil {
			return fmt.Errorf("load the rollouts: %w", err)
		}
		if err := n.co.ReplaceViews(e.Views()); err != nil {
			return fmt.Errorf("show the rollouts to the replicas: %w", err)
		}
		n.log.Info("serving as leader", "rollouts", len(e.Views()), "took", time.Since(start).Round(time.Millisecond).String())
		n.current.Store(e)
		defer n.current.CompareAndSwap(e, nil)
		w := &viewWriter{n: n, due: map[rollout.Key]*rollout.View{}, wake: make(chan struct{}, 1)}
		e.OnShow(w.add)
		var also []func(context.Context)
		if with != nil {
			also = with(e)
		}
		var wg sync.WaitGroup
		wg.Go(func() { w.run(ctx) })
		wg.Go(func() { _ = e.Run(ctx) })
		wg.Go(func() { n.pump(ctx, e) })
		for _, f := range also {
			wg.Go(func() { f(ctx) })
		}
		wg.Wait()
		return nil
	}
}

// viewWriter shows the other replicas the views the leader's commits
// changed: the latest of each rollout, written every flushEvery apart
// from the commits. An acknowledgement then waits for its evidence alone,
// not for views as wide as their rollouts, and a view that each batch of
// a burst rewrites is written once. A view is written after the commit
// that decided it, so no replica shows what is not stored; one not yet
// written when a leader dies is written by the next, which writes every
// view it loads (ReplaceViews).
type viewWriter struct {
	n    *Node
	mu   sync.Mutex
	due  map[rollout.Key]*rollout.View // nil: removed
	wake chan struct{}
}

// flushEvery gathers the views changed meanwhile into one write: well
// within the second in which an event shows on every replica.
const flushEvery = 20 * time.Millisecond

func (w *viewWriter) add(views []*rollout.View, removed []rollout.Key) {
	w.mu.Lock()
	for _, v := range views {
		w.due[v.Key()] = v
	}
	for _, k := range removed {
		w.due[k] = nil
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes the due views until ctx ends, then once more: a term that
// ends with its lease given up shows its last commits' views at once.
func (w *viewWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			w.flush()
			w.n.viewEp.Ok() // a warning of this term's
			return
		case <-w.wake:
		}
		w.flush()
		sleep(ctx, flushEvery)
	}
}

func (w *viewWriter) flush() {
	w.mu.Lock()
	due := w.due
	w.due = make(map[rollout.Key]*rollout.View, len(due))
	w.mu.Unlock()
	if len(due) == 0 {
		return
	}
	var (
		views   []*rollout.View
		removed []rollout.Key
	)
	for k, v := range due {
		if v == nil {
			removed = append(removed, k)
		} else {
			views = append(views, v)
		}
	}
	err := w.n.co.WriteViews(views, removed)
	if err == nil {
		w.n.succeeded(&w.n.viewEp, "showing the rollouts to the other replicas succeeds again")
		return
	}
	if errors.Is(err, store.ErrFenced) {
		return // the term is over: the next leader writes every view
	}
	w.n.failed(&w.n.viewEp, time.Now(), err, "showing the rollouts to the other replicas fails: they show them as they were")
	// Retried with what changed meanwhile, the newer of each.
	w.mu.Lock()
	for k, v := range due {
		if _, newer := w.due[k]; !newer {
			w.due[k] = v
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// OnEvent sets a function the leader calls for each entry of the inbox
// that was an event from notification-controller (the blindness
// watchdog's). Call it before Run.
func (n *Node) OnEvent(f func()) { n.onEvent = f }

// Events is the webhook's way in: its entries are events from
// notification-controller.
func (n *Node) Events() Submitter { return events{n} }

// Submitter takes an observation, as the webhook's.
type Submitter interface {
	Submit(ctx context.Context, o rollout.Observation) error
}

type events struct{ n *Node }

func (e events) Submit(ctx context.Context, o rollout.Observation) error {
	return e.n.submit(ctx, []rollout.Observation{o}, true)
}
