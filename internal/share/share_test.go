package share

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestDecide: a replica takes free clusters up to its share (the clusters
// over the replicas alive, itself counted; the first by name take the
// remainder), gives up one a round beyond
// it, and what it no longer wants at once; a live lease of another is
// never taken.
func TestDecide(t *testing.T) {
	live := func(holder string) store.ClusterShare {
		return store.ClusterShare{Lease: store.Lease{Holder: holder, Epoch: 1}, Live: true}
	}
	clusters := []string{"a", "b", "c", "d", "e"}
	for _, c := range []struct {
		name          string
		sh            store.Shares
		wanted, held  []string
		take, release int
		notTaken      []string
	}{
		{name: "alone: takes every free one", sh: store.Shares{Replicas: []string{"r1"}}, wanted: clusters, take: 5},
		{name: "not yet seen alive: counts itself", sh: store.Shares{Replicas: []string{"r2"}}, wanted: clusters, take: 3},
		{name: "the last by name: no remainder", sh: store.Shares{Replicas: []string{"r0", "r1"}}, wanted: clusters, take: 2},
		{name: "three alive, two held by others: two of the free", wanted: clusters,
			sh:   store.Shares{Replicas: []string{"r1", "r2", "r3"}, Leases: map[string]store.ClusterShare{"a": live("r2"), "b": live("r3")}},
			take: 2, notTaken: []string{"a", "b"}},
		{name: "an expired lease is free", wanted: []string{"a"},
			sh:   store.Shares{Replicas: []string{"r1"}, Leases: map[string]store.ClusterShare{"a": {Lease: store.Lease{Holder: "r2", Epoch: 3}}}},
			take: 1},
		{name: "a replica joined: one given back a round", sh: store.Shares{Replicas: []string{"r1", "r2"}}, wanted: clusters, held: clusters, release: 1},
		{name: "at its share: nothing moves", sh: store.Shares{Replicas: []string{"r1", "r2"}}, wanted: clusters, held: []string{"a", "b", "c"}},
		{name: "a Secret removed: given up at once", sh: store.Shares{Replicas: []string{"r1"}}, wanted: []string{"a"}, held: []string{"a", "x", "y"}, release: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			take, release := decide("r1", c.sh, c.wanted, c.held)
			if len(take) != c.take || len(release) != c.release {
				t.Fatalf("take %v, release %v: want %d and %d", take, release, c.take, c.release)
			}
			for _, name := range take {
				if slices.Contains(c.notTaken, name) || slices.Contains(c.held, name) {
					t.Fatalf("took %s", name)
				}
			}
		})
	}
}

// fleet runs sharers on one real PostgreSQL database, each wanting the
// same clusters read, and says who holds what.
type fleet struct {
	t       *testing.T
	conn    string
	mu      sync.Mutex
	running map[string]context.CancelFunc
	sharers map[string]*Sharer
	cos     map[string]*flaky
}

// flaky is a Coordination that fails while cut, as a partitioned
// replica's does.
type flaky struct {
	*store.Coordination
	mu  sync.Mutex
	cut bool
}

func (f *flaky) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return fmt.Errorf("cut off")
	}
	return nil
}
func (f *flaky) Share(ctx context.Context, r string, ttl time.Duration) (store.Shares, error) {
	if err := f.err(); err != nil {
		return store.Shares{}, err
	}
	return f.Coordination.Share(ctx, r, ttl)
}
func (f *flaky) RenewClusters(ctx context.Context, ls []store.ClusterLease, ttl time.Duration) ([]store.ClusterLease, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Coordination.RenewClusters(ctx, ls, ttl)
}

func (f *fleet) start(name string, clusters []string) {
	f.t.Helper()
	db, co, err := store.OpenPostgres(context.Background(), f.conn, store.PostgresOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close() })
	fc := &flaky{Coordination: co}
	s := New(fc, name, 600*time.Millisecond, 100*time.Millisecond, slog.New(slog.DiscardHandler), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	for _, c := range clusters {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, rctx, err := s.Hold(ctx, c)
				if err != nil {
					return
				}
				<-rctx.Done()
			}
		})
	}
	f.mu.Lock()
	f.running[name], f.sharers[name], f.cos[name] = func() { cancel(); wg.Wait() }, s, fc
	f.mu.Unlock()
	f.t.Cleanup(func() { cancel(); wg.Wait() })
}

func (f *fleet) stop(name string) {
	f.mu.Lock()
	stop := f.running[name]
	delete(f.running, name)
	delete(f.sharers, name)
	f.mu.Unlock()
	stop()
}

// held is who holds each cluster, by the sharers' own account.
func (f *fleet) held() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for name, s := range f.sharers {
		for _, c := range s.Held() {
			out[c] = append(out[c], name)
		}
	}
	return out
}

// await polls until ok accepts who holds what.
func (f *fleet) await(what string, ok func(map[string][]string) bool) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h := f.held(); !ok(h); h = f.held() {
		if time.Now().After(deadline) {
			f.t.Fatalf("never %s: %v", what, h)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spread reports whether every cluster is held by exactly one replica and
// each replica of names holds its share, give or take one.
func spread(clusters []string, names ...string) func(map[string][]string) bool {
	return func(h map[string][]string) bool {
		per := map[string]int{}
		for _, c := range clusters {
			if len(h[c]) != 1 {
				return false
			}
			per[h[c][0]]++
		}
		lo, hi := len(clusters)/len(names), (len(clusters)+len(names)-1)/len(names)
		for _, n := range names {
			if per[n] < lo || per[n] > hi {
				return false
			}
		}
		return len(per) == len(names)
	}
}

// TestSharers: on a real PostgreSQL, replicas share seven clusters out
// evenly, each held by one; one that stops gives its clusters up and the
// others take them at once; one cut off from the database stops reading
// its clusters when its leases may have run out, and the others take them
// over once they have; one joining is given clusters back, with every
// cluster held by one replica at a time all along.
func TestSharers(t *testing.T) {
	clusters := []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7"}
	f := &fleet{t: t, conn: pgtest.Start(t).NewDatabase(t), running: map[string]context.CancelFunc{}, sharers: map[string]*Sharer{}, cos: map[string]*flaky{}}
	never := func(h map[string][]string) {
		for c, holders := range h {
			if len(holders) > 1 {
				t.Errorf("%s read by %v at once", c, holders)
			}
		}
	}
	for _, name := range []string{"r1", "r2", "r3"} {
		f.start(name, clusters)
	}
	f.await("spread over three", spread(clusters, "r1", "r2", "r3"))

	f.stop("r3")
	f.await("spread over the two left", spread(clusters, "r1", "r2"))

	f.mu.Lock()
	cut := f.cos["r2"]
	f.mu.Unlock()
	before := f.sharers["r2"].Held()
	cut.mu.Lock()
	cut.cut = true
	cut.mu.Unlock()
	f.await("r2's clusters dropped by r2", func(h map[string][]string) bool {
		never(h)
		for _, c := range before {
			if slices.Contains(h[c], "r2") {
				return false
			}
		}
		return true
	})
	f.await("r2's clusters taken over by r1", func(h map[string][]string) bool {
		never(h)
		return spread(clusters, "r1")(h)
	})
	f.stop("r2")

	f.start("r4", clusters)
	f.await("clusters given back to r4", func(h map[string][]string) bool {
		never(h)
		return spread(clusters, "r1", "r4")(h)
	})
}
