// Package replica runs the service's state: one replica among several on
// one PostgreSQL store, or a process alone on bbolt, which is a replica
// that always leads. Every replica takes events and answers reads; one at
// a time leads: it holds the lease, runs the engine that commits, and
// does what must happen once (sending, forge delivery), each of its
// writes fenced by the lease's epoch. How the lease is held, how events
// reach the leader's engine and how the others show the rollouts (on
// PostgreSQL: engines of their own, fed the same log) is the replica's
// way (way.go), decided once by the store.
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
	db        *store.DB // the records
	way       way       // shared on PostgreSQL, alone on bbolt
	cfg       Config
	log       *slog.Logger
	reader    *engine.Reader
	normalise func(*rollout.Observation) error
	onEvent   func(cluster string)
	// newFollower makes the engine a replica that does not lead applies
	// the inbox to: the leader's configuration, set by LeadEngine.
	newFollower func() (*engine.Engine, error)

	// shown guards what shows in reader while this replica follows the
	// views of a leader of the release before: not once it leads (its
	// engine publishes into reader). A follower's engine is stopped
	// before the term's loads (way.yield).
	shown    sync.Mutex
	leading  atomic.Bool
	caughtUp atomic.Bool
	current  atomic.Pointer[engine.Engine] // the leader's engine, during its term
	epoch    atomic.Int64                  // of the term under way, 0 when following
	led      chan struct{}                 // closed when the first term's engine runs
	ledOnce  sync.Once
	fatal    chan error // a term of a replica alone that failed: Run returns it

	appends  atomic.Int64 // failed appends since start
	lastFail atomic.Int64 // unix nanos of the last
	appendEp episode.Tracker
	followEp episode.Tracker
	electEp  episode.Tracker
	pumpEp   episode.Tracker
}

// New returns a replica on db: one of several sharing co, PostgreSQL's
// coordination, or, when co is nil, a process alone (bbolt), which always
// leads. normalise checks an observation before it is appended to the
// inbox (the model's own check, so that it holds nothing the leader would
// refuse).
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
	n := &Node{db: db, cfg: cfg, log: log, reader: engine.NewReader(db, log), normalise: normalise,
		led: make(chan struct{}), fatal: make(chan error, 1)}
	if co == nil {
		n.way = alone{n}
	} else {
		co.RequireLease()
		n.way = &shared{Node: n, co: co, sw: following{resume: make(chan struct{}, 1)}}
	}
	return n, nil
}

// Reader is what this replica answers reads from.
func (n *Node) Reader() *engine.Reader { return n.reader }

// Reads answers reads on this replica: the live rollouts from its engine
// (the term's, or while it follows its follower's), the settled ones from
// the store, the counters of the engine while it leads (api.Rollouts).
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

// RegisterMetrics registers this replica's gauges: fdn_leader, and its
// way's (on PostgreSQL fdn_inbox_depth, the events acknowledged that no
// leader took yet).
func (n *Node) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(append(n.way.collectors(), LeaderGauge(n.Leading))...)
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

// CaughtUp reports whether this replica shows the rollouts as the store
// has them: it leads (its engine's are the store's), or its follower
// loaded them since it started, or since its term ended, and read the
// inbox to its end (under a leader of the release before: the views).
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
	return n.way.ping(ctx) == nil
}

// pingTimeout bounds Answering's question to PostgreSQL: well within a
// readiness probe's timeout.
const pingTimeout = 500 * time.Millisecond

// SubmitAll stores observations that belong together for the leader's
// engine and returns once they are committed (nil: acknowledge them),
// refused (rollout.ErrInvalid) or not stored (engine.ErrStore: retry).
func (n *Node) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	return n.way.submit(ctx, obs, false, nil)
}

// Fenced is SubmitAll for what a registered cluster's reader reads under
// its lease l on the cluster: on PostgreSQL each append checks l, and
// fails with store.ErrClusterFenced once another replica took the cluster
// over; alone, on bbolt, it is SubmitAll.
func (n *Node) Fenced(l store.ClusterLease) interface {
	SubmitAll(ctx context.Context, obs []rollout.Observation) error
} {
	return fenced{n, l}
}

type fenced struct {
	n *Node
	l store.ClusterLease
}

func (f fenced) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	return f.n.way.submit(ctx, obs, false, &f.l)
}

// Serving is closed once this replica can answer reads: at once on
// PostgreSQL, where a replica that does not lead answers from its
// follower (/readyz says when it has caught up); once its engine is
// loaded for a replica alone, which has nothing else to answer from.
func (n *Node) Serving() <-chan struct{} {
	if n.way.alone() {
		return n.led
	}
	c := make(chan struct{})
	close(c)
	return c
}

// engine waits for the engine of the term under way: a process alone
// takes events into it, from its start (before its engine runs) to its
// stop (engine.ErrStopped).
func (n *Node) engine(ctx context.Context) (*engine.Engine, error) {
	select {
	case <-n.led:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e := n.current.Load(); e != nil {
		return e, nil
	}
	return nil, engine.ErrStopped
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
	for _, ep := range []*episode.Tracker{&n.appendEp, &n.followEp, &n.electEp} {
		if since, _, why := ep.UnderWay(); !since.IsZero() {
			return fmt.Sprintf("PostgreSQL fails since %s: %s", since.UTC().Format(time.RFC3339), why)
		}
	}
	if since, _, why := n.pumpEp.UnderWay(); !since.IsZero() {
		return fmt.Sprintf("the leader cannot take the events from the inbox since %s: %s", since.UTC().Format(time.RFC3339), why)
	}
	return ""
}

// Run follows the leader's decisions and campaigns for the lease until
// ctx ends; while this replica leads, lead runs. On return the lease, if
// held, is given up, so that another replica takes over at once. A
// replica alone has no other to take over: a term of it that fails ends
// Run with the error.
func (n *Node) Run(ctx context.Context, lead Lead) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() { n.way.follow(ctx) })
	wg.Go(func() {
		select {
		case err := <-n.fatal:
			cancel(err)
		case <-ctx.Done():
		}
	})
	n.elect(ctx, lead)
	wg.Wait()
	if err := context.Cause(ctx); n.way.alone() && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
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
					in.lease, in.ok, in.err = n.way.Campaign(rctx, n.cfg.Identity, n.cfg.LeaseTTL)
				} else {
					in.ok, in.err = n.way.Renew(rctx, a.lease, n.cfg.LeaseTTL)
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
	n.caughtUp.Store(false) // until the follower is loaded
	n.shown.Unlock()
	n.epoch.Store(0)
	n.way.resumed()
	level := slog.LevelWarn
	if ctx.Err() != nil {
		level = slog.LevelInfo // the replica stops: nothing went wrong
	}
	n.log.Log(context.WithoutCancel(ctx), level, "no longer leading", "epoch", t.lease.Epoch, "why", why)
	if resign {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.Renew)
		if err := n.way.Resign(rctx, t.lease); err != nil {
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
	fence  func(*store.Lease)
	lease  store.Lease
	stop   context.CancelFunc
	done   chan struct{}
	expiry *time.Timer // signals expired when the lease runs out unrenewed
}

// begin fences the store with lease and runs lead until the term ends;
// expired is signalled when the lease runs out (valid from now), stopped
// when lead stops on its own.
func (n *Node) begin(ctx context.Context, lease store.Lease, lead Lead, valid time.Duration, expired, stopped chan struct{}) *term {
	n.way.Fence(&lease)
	signal := func(c chan struct{}) func() {
		return func() {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	termCtx, stop := context.WithCancel(ctx)
	t := &term{fence: n.way.Fence, lease: lease, stop: stop, done: make(chan struct{}), expiry: time.AfterFunc(valid, signal(expired))}
	n.shown.Lock()
	n.leading.Store(true)
	n.shown.Unlock()
	n.way.yield() // the term's engine shows the rollouts from now on
	n.epoch.Store(lease.Epoch)
	n.log.Info("leading", "epoch", lease.Epoch, "identity", n.cfg.Identity)
	go func() {
		defer close(t.done)
		err := lead(termCtx)
		switch {
		case termCtx.Err() != nil:
		case n.way.alone():
			n.fatal <- fmt.Errorf("leading failed: %w", err)
		default:
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
	t.fence(nil)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// LeadEngine is a Lead that runs the leader's engine for the term: it
// loads the live rollouts from the store, starts what the replica's way
// needs to take observations into it and show its decisions, and runs its
// clock. with, when set, is given the engine before it takes anything,
// and returns what else the leader runs with it until the term ends (the
// dispatchers, the blindness watchdog).
//
// While the replica does not lead, it applies the inbox to an engine of
// its own made with the same cfg and now (engine.NewFollower), which
// commits and sends nothing.
func (n *Node) LeadEngine(cfg rollout.Config, now func() time.Time, with func(e *engine.Engine) []func(ctx context.Context)) Lead {
	n.newFollower = func() (*engine.Engine, error) { return engine.NewFollower(n.reader, n.db, cfg, now) }
	return func(ctx context.Context) error {
		start := time.Now()
		e, err := engine.NewOn(n.reader, n.db, cfg, now)
		if err != nil {
			return fmt.Errorf("load the rollouts: %w", err)
		}
		loops, err := n.way.begin(e)
		if err != nil {
			return err
		}
		if with != nil {
			loops = append(loops, with(e)...)
		}
		n.log.Info("serving as leader", "rollouts", len(e.Views()), "took", time.Since(start).Round(time.Millisecond).String())
		n.current.Store(e)
		defer n.current.CompareAndSwap(e, nil)
		n.ledOnce.Do(func() { close(n.led) })
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		for _, f := range loops {
			wg.Go(func() { f(ctx) })
		}
		wg.Wait()
		return nil
	}
}

// OnEvent sets a function the leader calls for each entry of the inbox
// that was an event from notification-controller, with the cluster it
// names ("" none: the service's own), the blindness watchdog's. Call it
// before Run.
func (n *Node) OnEvent(f func(cluster string)) { n.onEvent = f }

// Events is the webhook's way in: its entries are events from
// notification-controller.
func (n *Node) Events() Submitter { return events{n} }

// Submitter takes an observation, as the webhook's.
type Submitter interface {
	Submit(ctx context.Context, o rollout.Observation) error
}

type events struct{ n *Node }

func (e events) Submit(ctx context.Context, o rollout.Observation) error {
	return e.n.way.submit(ctx, []rollout.Observation{o}, true, nil)
}
