package replica_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/replica"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

var cfg = rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"dev@example.com"},
	RoleOf: ingest.RoleOf, CommitOf: flux.GitCommit, DefaultCluster: "default", Verify: true}

// running is one replica under test.
type running struct {
	node *replica.Node
	db   *store.DB
	co   *store.Coordination
	stop func() // ends Run (the lease given up) and closes the store
	// terms receives the engine of each term it leads.
	terms chan *engine.Engine
}

func start(t *testing.T, conn, name string) *running {
	t.Helper()
	return startLogged(t, conn, name, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func startLogged(t *testing.T, conn, name string, log *slog.Logger) *running {
	t.Helper()
	db, co, err := store.OpenPostgres(context.Background(), conn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	model, err := rollout.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := replica.New(db, co, replica.Config{Identity: name, LeaseTTL: 2 * time.Second, Renew: 200 * time.Millisecond, Poll: 100 * time.Millisecond},
		model.Normalise, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	terms := make(chan *engine.Engine, 16)
	go func() {
		defer close(done)
		_ = n.Run(ctx, n.LeadEngine(cfg, time.Now, func(e *engine.Engine) []func(context.Context) {
			terms <- e
			return nil
		}))
	}()
	var once sync.Once
	r := &running{node: n, db: db, co: co, terms: terms, stop: func() {
		once.Do(func() {
			cancel()
			<-done
			db.Close()
		})
	}}
	t.Cleanup(r.stop)
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decided is the verdict of each rollout one engine decides from obs.
func decided(t *testing.T, obs []rollout.Observation) map[string]rollout.Verdict {
	t.Helper()
	ref := enginetest.Start(t, t.TempDir(), cfg, time.Now, false)
	for _, o := range obs {
		if err := ref.Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]rollout.Verdict{}
	for _, v := range ref.Views() {
		want[v.Hash] = v.Verdict
	}
	return want
}

// shows reports whether r shows each of want's verdicts.
func shows(r *running, want map[string]rollout.Verdict) func() bool {
	return func() bool {
		for h, v := range want {
			if verdict(r, h) != v {
				return false
			}
		}
		return true
	}
}

func verdict(r *running, hash string) rollout.Verdict {
	v, err := r.node.Reader().Lookup(engine.Query{Hash: hash})
	if err != nil {
		return rollout.VerdictUnknown
	}
	return v.Verdict
}

// TestReplicas: either replica takes events; one leads; both show the
// verdicts the leader decided; when the leader stops, the other takes over
// at once (the lease given up) and goes on from the same state.
func TestReplicas(t *testing.T) {
	conn := pgtest.Start(t).NewDatabase(t)
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	b := start(t, conn, "b")
	waitFor(t, "b to catch up", b.node.CaughtUp)
	if b.node.Leading() {
		t.Fatal("b leads while a does")
	}
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	half := len(obs) / 2
	for i, o := range obs[:half] {
		via := []*running{a, b}[i%2]
		if err := via.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	last := obs[half-1].Hash
	waitFor(t, "both to show the first half", func() bool {
		return verdict(a, last) != rollout.VerdictUnknown && verdict(b, last) != rollout.VerdictUnknown
	})
	a.stop()
	waitFor(t, "b to lead", b.node.Leading)
	for _, o := range obs[half:] {
		if err := b.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	// The same as one engine decides from all of them.
	want := decided(t, obs)
	waitFor(t, "b to show every verdict", shows(b, want))
	// A third replica starts warm from the views.
	c := start(t, conn, "c")
	waitFor(t, "c to catch up", c.node.CaughtUp)
	for h, v := range want {
		if got := verdict(c, h); got != v {
			t.Fatalf("c shows %s for %s, want %s", got, h, v)
		}
	}
	if c.node.Leading() {
		t.Fatal("c leads while b does")
	}
	if n, _ := b.node.AppendFailures(); n != 0 {
		t.Fatalf("%d appends failed", n)
	}
	var errInvalid = rollout.Observation{Cluster: "prod"}
	if err := c.node.Events().Submit(context.Background(), errInvalid); !errors.Is(err, rollout.ErrInvalid) {
		t.Fatalf("an invalid observation: %v, want ErrInvalid", err)
	}
}

// TestTermEnds: a leader shows its engine's views, held once; when its
// lease is taken, it follows the new leader's commits, all read again.
func TestTermEnds(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	if e := <-a.terms; e.Reader != a.node.Reader() {
		t.Fatal("the leader's engine publishes into a reader of its own: every view held twice")
	}
	b := start(t, conn, "b")
	waitFor(t, "b to catch up", b.node.CaughtUp)
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	half := len(obs) / 2
	for _, o := range obs[:half] {
		if err := a.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	last := obs[half-1].Hash
	waitFor(t, "both to show the first half", func() bool {
		return verdict(a, last) != rollout.VerdictUnknown && verdict(b, last) != rollout.VerdictUnknown
	})
	// b takes the lease, as after a's lease ran out: a's renewal fails.
	srv.Exec(t, conn, `UPDATE fdn_leader SET holder = 'b', epoch = epoch + 1, expires = now() + interval '1 hour'`)
	waitFor(t, "b to lead and a to follow", func() bool { return b.node.Leading() && !a.node.Leading() })
	for _, o := range obs[half:] {
		if err := b.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	if e := <-b.terms; e.Reader != b.node.Reader() {
		t.Fatal("the new leader's engine publishes into a reader of its own")
	}
	waitFor(t, "b to decide the second half", func() bool { return verdict(b, obs[len(obs)-1].Hash) != rollout.VerdictUnknown })
	want := map[string]rollout.Verdict{}
	for _, v := range b.node.Reader().Views() {
		want[v.Hash] = v.Verdict
	}
	waitFor(t, "a to show b's verdicts", func() bool {
		if !a.node.CaughtUp() || !a.node.Reader().Ready() {
			return false
		}
		for h, v := range want {
			if verdict(a, h) != v {
				return false
			}
		}
		return len(a.node.Reader().Views()) == len(want)
	})
}

// TestUnreadableEntry: an inbox entry this binary cannot read (a newer
// one's) stays, holds up the events after it (never dropped), and says so
// on the leader's warning until it is gone.
func TestUnreadableEntry(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	srv.Exec(t, conn, `INSERT INTO fdn_inbox (event, body) VALUES (true, '\x027b7d')`)
	all := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	obs := all[len(all)-1]
	if err := a.node.SubmitAll(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader to warn", func() bool { return strings.Contains(a.node.StoreWarning(), "newer version") })
	if d, err := a.co.InboxDepth(context.Background()); err != nil || d != 2 {
		t.Fatalf("inbox depth %d (%v), want both entries kept", d, err)
	}
	if verdict(a, obs.Hash) != rollout.VerdictUnknown {
		t.Fatal("events behind the unreadable entry were taken before it")
	}
	// A replica of the newer version took it.
	srv.Exec(t, conn, `DELETE FROM fdn_inbox WHERE body = '\x027b7d'`)
	waitFor(t, "the events behind it", func() bool { return verdict(a, obs.Hash) != rollout.VerdictUnknown })
	waitFor(t, "the warning to clear", func() bool { return a.node.StoreWarning() == "" })
}

// TestLeaderIsCaughtUp: a replica that wins the lease before it ever read
// the views (its read held up here by a lock on them) is caught up as
// leader: its engine's views are the store's. It was never ready before.
func TestLeaderIsCaughtUp(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	db, _, err := store.OpenPostgres(context.Background(), conn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close() // the schema made
	c, err := pgx.Connect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	tx, err := c.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `LOCK TABLE fdn_views IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	if !a.node.CaughtUp() {
		t.Fatal("the leader is not caught up: its first read of the views has not returned")
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to serve", a.node.Reader().Ready)
}

// TestLiveAnswersWhilePostgresIsDown: while PostgreSQL is down neither
// replica says it can answer (the leader no more than the follower), yet
// both answer the commits under way from memory, by full hash and by
// prefix; once it is back both say so again.
func TestLiveAnswersWhilePostgresIsDown(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	b := start(t, conn, "b")
	waitFor(t, "b to catch up", b.node.CaughtUp)
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, o := range obs {
		if err := b.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	last := obs[len(obs)-1].Hash
	waitFor(t, "both to show the last commit", func() bool {
		return verdict(a, last) != rollout.VerdictUnknown && verdict(b, last) != rollout.VerdictUnknown
	})
	v, err := a.node.Reader().Lookup(engine.Query{Hash: last})
	if err != nil {
		t.Fatal(err)
	}
	want := v.Verdict
	for _, r := range []*running{a, b} {
		if !r.node.Answering() {
			t.Fatal("a replica does not answer with PostgreSQL up")
		}
	}

	srv.Stop()
	for _, r := range []*running{a, b} {
		waitFor(t, "a replica to say it cannot answer", func() bool { return !r.node.Answering() })
		for _, q := range []engine.Query{{Hash: last}, {Hash: last, Cluster: v.Cluster}, {Hash: last[:10], Prefix: true}} {
			if v, err := r.node.Reader().Lookup(q); err != nil || v.Verdict != want {
				t.Fatalf("%+v with PostgreSQL down: %v, %v; want %s", q, v, err, want)
			}
		}
	}
	srv.Resume(t)
	for _, r := range []*running{a, b} {
		waitFor(t, "a replica to answer again", r.node.Answering)
	}
}

// TestAlone: a replica on bbolt leads at once, with no database behind
// its lease: it serves once its engine is loaded, takes events into it
// (the acknowledgement is the engine's commit) and answers them; a term
// of it that fails ends Run with the error, as nobody else can take over.
func TestAlone(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	model, err := rollout.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := replica.New(db, nil, replica.Config{Identity: "alone"}, model.Normalise, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, n.LeadEngine(cfg, time.Now, nil)) }()
	// Submitted before the engine runs: taken once it does.
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	if err := n.Events().Submit(context.Background(), obs[0]); err != nil {
		t.Fatal(err)
	}
	<-n.Serving()
	if !n.Leading() || n.Role() != "leader" || !n.Answering() {
		t.Fatalf("alone: leading %v, role %s, answering %v", n.Leading(), n.Role(), n.Answering())
	}
	for _, o := range obs[1:] {
		if err := n.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	// Acknowledged means committed: shown at once, no follower's delay.
	for _, o := range obs {
		if o.Hash == "" {
			continue // a layer's membership, of no revision
		}
		if _, err := n.Reader().Lookup(engine.Query{Hash: o.Hash}); err != nil {
			t.Fatalf("%s acknowledged and not shown: %v", o.Hash, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run stopped: %v", err)
	}
	if err := n.Events().Submit(context.Background(), obs[0]); !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("an event after the stop: %v, want ErrStopped", err)
	}

	failing, err := replica.New(db, nil, replica.Config{Identity: "failing"}, model.Normalise, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	broken := errors.New("the state cannot be read")
	err = failing.Run(context.Background(), func(context.Context) error { return broken })
	if !errors.Is(err, broken) {
		t.Fatalf("a replica alone whose term failed: %v, want its error", err)
	}
}
