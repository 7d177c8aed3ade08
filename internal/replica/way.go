package replica

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// way is what the store decides of a replica, once, when it is made: how
// the lease is held, how observations reach the leader's engine, and how
// the replicas that do not lead are shown its decisions. shared
// (shared.go) is PostgreSQL's; alone is bbolt's.
type way interface {
	Campaign(ctx context.Context, holder string, ttl time.Duration) (store.Lease, bool, error)
	Renew(ctx context.Context, l store.Lease, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, l store.Lease) error
	// Fence makes the store commit only within l's term (nil: none).
	Fence(l *store.Lease)
	// submit stores observations that belong together for the leader's
	// engine: nil once they may be acknowledged. A registered cluster's
	// reader's are stored under its lease on the cluster (fence, nil for
	// none), only while it holds it.
	submit(ctx context.Context, obs []rollout.Observation, event bool, fence *store.ClusterLease) error
	// follow shows this replica the rollouts while it does not lead, until
	// ctx ends.
	follow(ctx context.Context)
	// yield stops showing them when a term of this replica begins (leading
	// is set), before its engine loads; resumed says that the term ended.
	yield()
	resumed()
	// begin is given the engine of a term that begins; it returns what
	// takes the observations into it and shows its decisions to the other
	// replicas until the term ends.
	begin(e *engine.Engine) ([]func(context.Context), error)
	// ping reports whether the store answers now.
	ping(ctx context.Context) error
	// alone reports whether no other replica can take over.
	alone() bool
	collectors() []prometheus.Collector
}

// alone is the way of a process alone on bbolt, which locks its file to
// one process: its lease needs no database and is always granted, events
// go straight into its engine, and there is nobody to show decisions to.
type alone struct{ n *Node }

func (alone) Campaign(_ context.Context, holder string, _ time.Duration) (store.Lease, bool, error) {
	return store.Lease{Holder: holder, Epoch: 1}, true, nil
}
func (alone) Renew(context.Context, store.Lease, time.Duration) (bool, error) { return true, nil }
func (alone) Resign(context.Context, store.Lease) error                       { return nil }
func (alone) Fence(*store.Lease)                                              {}
func (alone) follow(context.Context)                                          {}
func (alone) yield()                                                          {}
func (alone) resumed()                                                        {}
func (alone) ping(context.Context) error                                      { return nil }
func (alone) alone() bool                                                     { return true }
func (alone) collectors() []prometheus.Collector                              { return nil }

func (alone) begin(*engine.Engine) ([]func(context.Context), error) { return nil, nil }

// submit commits the observations in the engine: its own answer is the
// acknowledgement (engine.SubmitAll).
func (a alone) submit(ctx context.Context, obs []rollout.Observation, _ bool, _ *store.ClusterLease) error {
	e, err := a.n.engine(ctx)
	if err != nil {
		return err
	}
	return e.SubmitAll(ctx, obs)
}
