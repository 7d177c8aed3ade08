// Package channeltest is a channel's dispatcher on a real store, for the
// tests of the chats and the webhook: the test publishes verdicts as the
// engine does, moves the clock and flushes.
package channeltest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

// T0 is when a Rig's clock starts.
var T0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// Hash is the commit of the rollouts a Rig publishes.
const Hash = "0123456789abcdef0123456789abcdef01234567"

// Links are the links of the messages the tests' deliverers make.
func Links() channel.Links {
	return channel.Links{
		Commit: func(_ string, _ rollout.Ref, c string) string { return "https://github.com/acme/app/commit/" + c },
		Page:   func(k rollout.Key) string { return "https://fdn.example.com/ui/" + k.Cluster + "/" + k.Hash },
	}
}

// Rig is one channel's outbox on a store in a temporary directory.
type Rig struct {
	T      testing.TB
	Clock  *forgetest.Clock // the dispatcher's and the contract server's time
	DB     *store.DB
	Spec   outbox.Channel
	D      *outbox.Dispatcher
	Log    *syncbuf.Buffer // what the deliverer and the dispatcher log
	Logger *slog.Logger
	Pace   time.Duration // the dispatcher's (set before Dispatch)
}

// New opens the store with the channel spec.
func New(t testing.TB, spec outbox.Channel) *Rig {
	t.Helper()
	r := &Rig{T: t, Clock: forgetest.NewClock(T0), Spec: spec, Log: &syncbuf.Buffer{}}
	r.Logger = slog.New(slog.NewTextHandler(r.Log, nil))
	var err error
	if r.DB, err = store.Open(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.DB.Close() })
	if err := r.DB.SetChannels(spec); err != nil {
		t.Fatal(err)
	}
	return r
}

// Dispatch makes the channel's dispatcher of to.
func (r *Rig) Dispatch(to outbox.Deliverer) {
	r.D = outbox.NewDispatcher(r.DB.Channel(r.Spec.Name), to, outbox.DispatchConfig{AlertAfter: 5 * time.Minute, Pace: r.Pace, Log: r.Logger, Now: r.Clock.Now})
}

// Publish commits a verdict of the rollout of Hash on cluster, as the
// engine does; how sets what else it is (Progress, Restate).
func (r *Rig) Publish(cluster string, v rollout.Verdict, s rollout.Shown, how ...func(*rollout.Published)) {
	r.T.Helper()
	s.Revision, s.Commit = "main@sha1:"+Hash, Hash
	p := rollout.Published{Key: rollout.Key{Cluster: cluster, Hash: Hash}, Verdict: v, At: r.Clock.Now(), Shown: s}
	for _, f := range how {
		f(&p)
	}
	if err := r.DB.Commit(&rollout.Batch{Published: []rollout.Published{p}, At: r.Clock.Now()}); err != nil {
		r.T.Fatal(err)
	}
}

// Progress and Restate are Publish's hows.
func Progress(p *rollout.Published) { p.Progress = true }
func Restate(p *rollout.Published)  { p.Restate = true }

// Flush flushes once and returns when the next attempt is due.
func (r *Rig) Flush() time.Time { return r.D.Flush(context.Background()) }

// FlushAll flushes once and fails the test unless everything due was
// delivered.
func (r *Rig) FlushAll() {
	r.T.Helper()
	if next := r.Flush(); !next.IsZero() {
		ps, _ := r.DB.Channel(r.Spec.Name).Publications()
		r.T.Fatalf("next attempt at %v: want everything delivered; outbox %+v", next, ps)
	}
}

// Record returns the outbox's record of the rollout of Hash on cluster.
func (r *Rig) Record(cluster string) outbox.Publication {
	r.T.Helper()
	p, ok, err := r.DB.Channel(r.Spec.Name).Publication(rollout.Key{Cluster: cluster, Hash: Hash})
	if err != nil || !ok {
		r.T.Fatalf("no record of %s: %v", cluster, err)
	}
	return p
}
