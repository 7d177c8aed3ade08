package forgetest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// T0 is when a Rig's clock starts.
var T0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// Clock is a dispatcher's and a contract server's time, moved by the test
// alone.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock on.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Rig is a forge's dispatcher on a real store: the test decides verdicts
// (published as the engine does, with what is shown of them) and
// flushes.
type Rig struct {
	T     testing.TB
	Clock *Clock
	DB    *store.DB
	D     *outbox.Dispatcher
	Forge forge.Forge
	Repo  forge.Repo
	// Environments is the dispatcher's Config.Environments (set before
	// Restart).
	Environments map[string]string
}

// NewRig opens a store in a temporary directory; the test makes its forge
// with the Rig's clock and calls Restart.
func NewRig(t testing.TB, repo forge.Repo) *Rig {
	t.Helper()
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &Rig{T: t, Clock: &Clock{t: T0}, DB: db, Repo: repo}
}

// TokenFile writes token to a file of its own and returns its path.
func TokenFile(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Restart makes a new dispatcher for f on the same store: what a
// restarted service does.
func (r *Rig) Restart(f forge.Forge) {
	r.Forge = f
	r.D = forge.NewDispatcher(r.DB.Channel("forge"), r.DB, f, forge.Config{
		Repo:         func(string, rollout.Ref) (forge.Repo, error) { return r.Repo, nil },
		LogURL:       func(k rollout.Key) string { return "https://fdn.example.com/ui/" + k.Cluster + "/" + k.Hash },
		AlertAfter:   5 * time.Minute,
		Environments: r.Environments,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), r.Clock.Now, nil)
}

// Decide publishes the verdict of a rollout of a git revision on main, as
// the engine does in the transaction of the change.
func (r *Rig) Decide(cluster, hash string, v rollout.Verdict, summary string) {
	r.T.Helper()
	r.PublishView(&rollout.View{Cluster: cluster, Hash: hash, Revision: "main@sha1:" + hash, Commit: hash, Verdict: v, Summary: summary})
}

// PublishView publishes v's verdict with what v shows.
func (r *Rig) PublishView(v *rollout.View) {
	r.T.Helper()
	r.publish(rollout.Published{Key: v.Key(), Verdict: v.Verdict, At: r.Clock.Now(), Shown: rollout.ShownOf(v)})
}

// PublishBare writes a verdict to the forge outbox without what is shown
// of it: the record of an older binary whose rollout is gone.
func (r *Rig) PublishBare(k rollout.Key, v rollout.Verdict) {
	r.T.Helper()
	r.publish(rollout.Published{Key: k, Verdict: v, At: r.Clock.Now()})
}

func (r *Rig) publish(p rollout.Published) {
	r.T.Helper()
	if err := r.DB.Commit(&rollout.Batch{Published: []rollout.Published{p}, At: r.Clock.Now()}); err != nil {
		r.T.Fatal(err)
	}
}

// FlushAll flushes once and fails the test unless everything due was
// delivered.
func (r *Rig) FlushAll() {
	r.T.Helper()
	if next := r.D.Flush(context.Background()); !next.IsZero() {
		r.T.Fatalf("next attempt %v: want everything delivered; outbox %+v", next, r.Due())
	}
}

// Due returns the outbox's records still to deliver.
func (r *Rig) Due() []outbox.Publication {
	r.T.Helper()
	ps, err := r.DB.Channel("forge").Publications()
	if err != nil {
		r.T.Fatal(err)
	}
	return ps
}

// Record returns the outbox's record of a rollout.
func (r *Rig) Record(cluster, hash string) outbox.Publication {
	r.T.Helper()
	p, ok, err := r.DB.Channel("forge").Publication(rollout.Key{Cluster: cluster, Hash: hash})
	if err != nil || !ok {
		r.T.Fatalf("no outbox record of %s on %s: %v", hash, cluster, err)
	}
	return p
}
