// Package share shares the registered clusters out among the replicas on
// PostgreSQL: each cluster is read by the one replica holding its lease
// (store.Coordination's cluster leases), the leases spread evenly over the
// replicas alive, taken over within the lease's time when a replica dies,
// and given back one at a time when one joins, so that no rebalance moves
// every cluster at once. What a reader reads is appended under its lease,
// which fences it: a replica whose lease ran out appends nothing once
// another took the cluster over.
package share

import (
	"cmp"
	"context"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// Coordination is what the sharer asks the database (store.Coordination).
type Coordination interface {
	Share(ctx context.Context, replica string, ttl time.Duration) (store.Shares, error)
	Unshare(ctx context.Context, replica string) error
	TakeCluster(ctx context.Context, cluster, holder string, ttl time.Duration) (store.ClusterLease, bool, error)
	RenewClusters(ctx context.Context, ls []store.ClusterLease, ttl time.Duration) ([]store.ClusterLease, error)
	ReleaseCluster(ctx context.Context, l store.ClusterLease) error
}

// Sharer is one replica's part: the clusters it wants read (those
// registered, each waiting in Hold) and the leases it holds.
type Sharer struct {
	co         Coordination
	me         string
	ttl, renew time.Duration
	log        *slog.Logger
	now        func() time.Time

	mu     sync.Mutex
	wanted map[string]int // clusters waiting in Hold, by how many
	held   map[string]*term
	// until is when the leases held run out unrenewed on this clock: a
	// replica that cannot reach the database stops reading by then.
	until time.Time
	wake  chan struct{} // a cluster wanted or forgotten: share again now
	next  chan struct{} // closed at the end of the next round
}

// term is a lease held: its reader reads under ctx until it is lost.
type term struct {
	lease  store.ClusterLease
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns the sharer of replica me; leases last ttl unrenewed and are
// renewed every renew.
func New(co Coordination, me string, ttl, renew time.Duration, log *slog.Logger, now func() time.Time) *Sharer {
	return &Sharer{co: co, me: me, ttl: ttl, renew: renew, log: log, now: now,
		wanted: map[string]int{}, held: map[string]*term{}, wake: make(chan struct{}, 1)}
}

// Hold waits until this replica holds cluster's lease and returns it with
// a context that ends when the lease is lost (or given up to another
// replica, or ctx ends): read the cluster under it, and append what is
// read under the lease. Call it again once that context ends.
func (s *Sharer) Hold(ctx context.Context, cluster string) (store.ClusterLease, context.Context, error) {
	s.want(cluster, 1)
	for {
		s.mu.Lock()
		t := s.held[cluster]
		changed := s.changed()
		s.mu.Unlock()
		if t != nil && t.ctx.Err() == nil {
			// Read until the lease or ctx ends; wanted meanwhile.
			rctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(t.ctx, cancel)
			context.AfterFunc(rctx, func() {
				stop()
				s.want(cluster, -1)
			})
			return t.lease, rctx, nil
		}
		select {
		case <-ctx.Done():
			s.want(cluster, -1)
			return store.ClusterLease{}, nil, ctx.Err()
		case <-changed:
		}
	}
}

// want counts a runner wanting cluster read (by), and shares again.
func (s *Sharer) want(cluster string, by int) {
	s.mu.Lock()
	if s.wanted[cluster] += by; s.wanted[cluster] <= 0 {
		delete(s.wanted, cluster)
	}
	s.mu.Unlock()
	s.poke()
}

// changed is closed at the end of the next round; under mu.
func (s *Sharer) changed() <-chan struct{} {
	if s.next == nil {
		s.next = make(chan struct{})
	}
	return s.next
}

func (s *Sharer) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run shares until ctx ends, then gives every lease up and leaves, so that
// the other replicas take its clusters over at once.
func (s *Sharer) Run(ctx context.Context) {
	t := time.NewTicker(s.renew)
	defer t.Stop()
	began := s.now()
	for {
		// For a round's time it only says it is alive, so that replicas
		// starting together see one another before they take.
		s.share(ctx, s.now().Sub(began) < s.renew)
		select {
		case <-ctx.Done():
			s.leave()
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// share is one round: say this replica is alive, renew what it holds,
// give up what it holds beyond its share or no longer wants, and take free
// clusters up to its share (not while it is new).
func (s *Sharer) share(ctx context.Context, joining bool) {
	asked := s.now()
	sh, err := s.co.Share(ctx, s.me, s.ttl)
	if err != nil {
		s.expire(asked)
		s.log.Warn("sharing the registered clusters: PostgreSQL does not answer", "err", err)
		return
	}
	s.mu.Lock()
	var leases []store.ClusterLease
	for _, t := range s.held {
		leases = append(leases, t.lease)
	}
	s.mu.Unlock()
	renewed, err := s.co.RenewClusters(ctx, leases, s.ttl)
	if err != nil {
		s.expire(asked)
		s.log.Warn("renewing the leases of the registered clusters read", "err", err)
		return
	}
	s.mu.Lock()
	// Checked a round at a time: two renewals short of the lease, so that
	// this replica has stopped reading before the database lets another
	// take over (the election's margin, plus the round's wait).
	s.until = asked.Add(s.ttl - 2*s.renew)
	kept := make(map[store.ClusterLease]bool, len(renewed))
	for _, l := range renewed {
		kept[l] = true
	}
	for name, t := range s.held {
		if !kept[t.lease] {
			s.log.Warn("the lease on a registered cluster was lost: another replica reads it", "cluster", name, "epoch", t.lease.Epoch)
			s.drop(name)
		}
	}
	wanted := make([]string, 0, len(s.wanted))
	for name := range s.wanted {
		wanted = append(wanted, name)
	}
	held := make([]string, 0, len(s.held))
	for name := range s.held {
		held = append(held, name)
	}
	s.mu.Unlock()
	take, release := decide(s.me, sh, wanted, held)
	for _, name := range release {
		s.mu.Lock()
		t := s.held[name]
		s.drop(name) // its reader stops before another replica may take it
		s.mu.Unlock()
		if t == nil {
			continue
		}
		if err := s.co.ReleaseCluster(ctx, t.lease); err != nil {
			s.log.Warn("giving up a registered cluster's lease; it runs out instead", "cluster", name, "err", err)
		} else {
			s.log.Info("gave a registered cluster up to another replica", "cluster", name, "epoch", t.lease.Epoch)
		}
	}
	if !joining {
		for _, name := range take {
			l, ok, err := s.co.TakeCluster(ctx, name, s.me, s.ttl)
			if err != nil || !ok {
				continue // another replica took it first, or the next round tries again
			}
			s.log.Info("reading a registered cluster", "cluster", name, "epoch", l.Epoch)
			tctx, cancel := context.WithCancel(context.Background())
			s.mu.Lock()
			s.held[name] = &term{lease: l, ctx: tctx, cancel: cancel}
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	if s.next != nil {
		close(s.next)
		s.next = nil
	}
	s.mu.Unlock()
}

// drop ends the term on name; under mu.
func (s *Sharer) drop(name string) {
	if t := s.held[name]; t != nil {
		t.cancel()
		delete(s.held, name)
	}
}

// expire ends every term once the leases may have run out on this clock
// without a renewal: another replica may read the clusters by then.
func (s *Sharer) expire(asked time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) == 0 || asked.Before(s.until) {
		return
	}
	s.log.Warn("the leases of the registered clusters read ran out unrenewed: they are not read here", "clusters", len(s.held))
	for name := range s.held {
		s.drop(name)
	}
}

// leave gives every lease up and says this replica is gone.
func (s *Sharer) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	var leases []store.ClusterLease
	for name, t := range s.held {
		leases = append(leases, t.lease)
		s.drop(name)
	}
	s.mu.Unlock()
	for _, l := range leases {
		_ = s.co.ReleaseCluster(ctx, l)
	}
	_ = s.co.Unshare(ctx, s.me)
}

// Held are the clusters whose leases this replica holds, sorted.
func (s *Sharer) Held() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.held))
	for name := range s.held {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// decide is one round's decision of replica me, given what the database
// says (sh), the clusters it wants read (those registered here: every
// replica registers the same) and those it holds: the free clusters it
// takes (up to its share: the clusters over the replicas alive), and
// those it gives up: the ones no longer wanted, and one beyond its
// share (gradually: one a round). Each replica prefers clusters by a hash
// of the cluster's name and its own (rendezvous hashing), so that replicas
// taking at once mostly want different ones.
func decide(me string, sh store.Shares, wanted, held []string) (take, release []string) {
	replicas := sh.Replicas
	if !slices.Contains(replicas, me) {
		replicas = append(slices.Clone(replicas), me)
		slices.Sort(replicas)
	}
	// The shares differ by one at most: the first replicas by name take
	// the remainder.
	n, i := len(replicas), slices.Index(replicas, me)
	fair := len(wanted) / n
	if i < len(wanted)%n {
		fair++
	}
	var mine []string
	for _, name := range held {
		if slices.Contains(wanted, name) {
			mine = append(mine, name)
		} else {
			release = append(release, name)
		}
	}
	byPreference := func(names []string) {
		slices.SortFunc(names, func(a, b string) int {
			return cmp.Or(cmp.Compare(score(b, me), score(a, me)), cmp.Compare(a, b))
		})
	}
	if len(mine) > fair {
		byPreference(mine)
		return nil, append(release, mine[len(mine)-1])
	}
	var free []string
	for _, name := range wanted {
		if l, ok := sh.Leases[name]; (!ok || !l.Live) && !slices.Contains(mine, name) {
			free = append(free, name)
		}
	}
	byPreference(free)
	return free[:min(len(free), fair-len(mine))], release
}

// score is replica's preference for cluster.
func score(cluster, replica string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write([]byte(replica))
	return h.Sum64()
}
