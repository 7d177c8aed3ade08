package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// The leader's lease and its fencing, with two handles on one database as
// two replicas have (in the style of Vault's ExerciseHABackend).

// replicaHandle is what one replica opens: the records and the
// coordination on them.
type replicaHandle struct {
	*DB
	*Coordination
}

// openReplica opens a replica's handle on database conn; the test's
// cleanup closes it.
func openReplica(t *testing.T, conn string, opt PostgresOptions) replicaHandle {
	t.Helper()
	d, c, err := OpenPostgres(context.Background(), conn, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return replicaHandle{d, c}
}

func twoReplicas(t *testing.T, opt PostgresOptions) (a, b replicaHandle) {
	t.Helper()
	conn := pgtest.Start(t).NewDatabase(t)
	return openReplica(t, conn, opt), openReplica(t, conn, opt)
}

// campaignUntil campaigns for holder until it wins, for at most ten
// seconds: a lease expires on the database's clock.
func campaignUntil(t *testing.T, d *Coordination, holder string, ttl time.Duration) Lease {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, ok, err := d.Campaign(context.Background(), holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never took the lease", holder)
		}
		time.Sleep(20 * time.Millisecond) // the database's clock must pass the expiry
	}
}

func evidenceBatch(hash string) *rollout.Batch {
	b := sampleBatch()
	out := &rollout.Batch{Puts: map[rollout.EvidenceKey]*rollout.Evidence{}, At: at}
	for k, ev := range b.Puts {
		k.Hash = hash
		out.Puts[k] = ev
	}
	return out
}

// TestLease: one holder at a time; renewing keeps it; a term's epoch only
// grows; an expired or given-up lease is taken over at once by another,
// and its old holder can neither renew it nor commit anything.
func TestLease(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{})
	ctx := context.Background()
	la, ok, err := a.Campaign(ctx, "a", time.Minute)
	if err != nil || !ok || la.Epoch != 1 {
		t.Fatalf("first campaign: %+v %v %v, want epoch 1", la, ok, err)
	}
	if _, ok, err := b.Campaign(ctx, "b", time.Minute); err != nil || ok {
		t.Fatalf("b took a held lease: %v %v", ok, err)
	}
	if again, ok, err := a.Campaign(ctx, "a", time.Minute); err != nil || !ok || again != la {
		t.Fatalf("the holder campaigning again: %+v %v %v, want its term", again, ok, err)
	}
	if ok, err := a.Renew(ctx, la, time.Minute); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	a.Fence(&la)
	if err := a.Commit(evidenceBatch(strings.Repeat("1", 40))); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
	// Given up: b takes over at once, in a new term.
	if err := a.Resign(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, ok, err := b.Campaign(ctx, "b", 200*time.Millisecond)
	if err != nil || !ok || lb.Epoch != 2 {
		t.Fatalf("after a resigned: %+v %v %v, want b in epoch 2", lb, ok, err)
	}
	if err := a.Commit(evidenceBatch(strings.Repeat("2", 40))); !errors.Is(err, ErrFenced) {
		t.Fatalf("a's commit after resigning: %v, want ErrFenced", err)
	}
	if ok, err := a.Renew(ctx, la, time.Minute); err != nil || ok {
		t.Fatalf("a renewed a lease it gave up: %v %v", ok, err)
	}
	// Expired: a takes over when the database's clock passes it.
	la = campaignUntil(t, a.Coordination, "a", time.Minute)
	if la.Epoch != 3 {
		t.Fatalf("a's new term: %+v, want epoch 3", la)
	}
	b.Fence(&lb)
	if err := b.Commit(evidenceBatch(strings.Repeat("3", 40))); !errors.Is(err, ErrFenced) {
		t.Fatalf("b's commit after its lease expired: %v, want ErrFenced", err)
	}
	a.Fence(&la)
	if err := a.Commit(evidenceBatch(strings.Repeat("4", 40))); err != nil {
		t.Fatalf("a's commit in its new term: %v", err)
	}
	hashes := map[string]bool{}
	if err := a.Load(func(k rollout.EvidenceKey, _ *rollout.Evidence) error { hashes[k.Hash[:1]] = true; return nil },
		func(string) {}, func(rollout.FloorKey, rollout.Floor) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(hashes) != 2 || !hashes["1"] || !hashes["4"] {
		t.Fatalf("committed: %v, want the leaders' in their terms alone (1 and 4)", hashes)
	}
	if l, _, ok, err := b.Leader(ctx); err != nil || !ok || l != la {
		t.Fatalf("leader as b reads it: %+v %v %v, want %+v", l, ok, err, la)
	}
}

// TestTakeoverWaitsForTheLeadersTransaction: a write transaction of the
// leader holds its lease row, so a replica taking an expired lease over
// waits for it to end, and the two never write at once; the old leader's
// next write is fenced.
func TestTakeoverWaitsForTheLeadersTransaction(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{})
	ctx := context.Background()
	la := campaignUntil(t, a.Coordination, "a", 500*time.Millisecond)
	a.Fence(&la)
	inTx, release, committed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		committed <- a.kv.update(func(tx txn) error {
			close(inTx)
			<-release
			return tx.Bucket(bucketMeta).Put([]byte("a-was-here"), []byte("1"))
		})
	}()
	<-inTx
	took := make(chan Lease, 1)
	go func() { took <- campaignUntil(t, b.Coordination, "b", time.Minute) }()
	// b's campaign waits on the row lock once a's lease has expired.
	waitFor(t, "b to wait on the lease row's lock", func() bool {
		var n int
		err := a.kv.(*pgBackend).pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO fdn_leader%'`).Scan(&n)
		return err == nil && n == 1
	})
	select {
	case l := <-took:
		t.Fatalf("b took the lease (%+v) while a's transaction was open", l)
	default:
	}
	close(release)
	if err := <-committed; err != nil {
		t.Fatalf("a's transaction, begun in its term: %v", err)
	}
	if lb := <-took; lb.Epoch != la.Epoch+1 {
		t.Fatalf("b's term %+v, want epoch %d", lb, la.Epoch+1)
	}
	if err := a.SetHead("prod", "x", "y"); !errors.Is(err, ErrFenced) {
		t.Fatalf("a's write after the takeover: %v, want ErrFenced", err)
	}
}

// TestPausedLeaderLosesItsTransaction: a leader paused inside a write
// transaction (SIGSTOP) keeps no lock past the idle limit: the server ends
// its session, another replica takes over, and the paused one commits
// nothing when it resumes.
func TestPausedLeaderLosesItsTransaction(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{IdleInTransaction: 300 * time.Millisecond})
	la := campaignUntil(t, a.Coordination, "a", 200*time.Millisecond)
	a.Fence(&la)
	took := make(chan Lease, 1)
	err := a.kv.update(func(tx txn) error {
		// Paused here: b takes over meanwhile.
		go func() { took <- campaignUntil(t, b.Coordination, "b", time.Minute) }()
		<-took
		return tx.Bucket(bucketMeta).Put([]byte("a-was-here"), []byte("1"))
	})
	if err == nil {
		t.Fatal("the paused leader committed")
	}
	if v := b.getMeta(t, "a-was-here"); v != nil {
		t.Fatalf("the paused leader's write is there: %q", v)
	}
}

func (d *DB) getMeta(t *testing.T, key string) []byte {
	t.Helper()
	var v []byte
	if err := d.kv.view(func(tx txn) error { v = tx.Bucket(bucketMeta).Get([]byte(key)); return nil }); err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterLeases: the replicas alive are those whose rows are
// unexpired; a cluster's lease is held by one replica at a time, its epoch
// growing at each takeover; renewals keep those still held and drop the
// others; what a reader appends under a lease no longer held is refused
// (ErrClusterFenced) while the rest of its group, events and other
// clusters' entries, is appended; the leader's lease is not among them.
func TestClusterLeases(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{})
	ctx := context.Background()
	if _, ok, err := a.Campaign(ctx, "a", time.Minute); err != nil || !ok {
		t.Fatalf("the leader's lease: %v %v", ok, err)
	}
	if _, err := b.Share(ctx, "b", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sh, err := a.Share(ctx, "a", time.Minute)
	if err != nil || !slices.Equal(sh.Replicas, []string{"a", "b"}) || len(sh.Leases) != 0 {
		t.Fatalf("shares %+v (%v), want replicas a and b, no lease", sh, err)
	}
	la, ok, err := a.TakeCluster(ctx, "prod-eu", "a", time.Minute)
	if err != nil || !ok || la.Epoch != 1 {
		t.Fatalf("a takes prod-eu: %+v %v %v", la, ok, err)
	}
	if _, ok, err := b.TakeCluster(ctx, "prod-eu", "b", time.Minute); err != nil || ok {
		t.Fatalf("b took a held cluster: %v %v", ok, err)
	}
	lq, _, err := a.TakeCluster(ctx, "qa", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := a.RenewClusters(ctx, []ClusterLease{la, lq}, time.Minute); err != nil || len(held) != 2 {
		t.Fatalf("renewed %v (%v), want both", held, err)
	}
	obs := []rollout.Observation{inboxObs(1)}
	if err := a.Append(ctx, obs, false, &la); err != nil {
		t.Fatalf("an append under a held lease: %v", err)
	}

	// a gives prod-eu up: b takes it in a new epoch, and a's appends
	// under its old lease are refused, while the rest of a group goes in.
	if err := a.ReleaseCluster(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, ok, err := b.TakeCluster(ctx, "prod-eu", "b", time.Minute)
	if err != nil || !ok || lb.Epoch != 2 {
		t.Fatalf("b takes prod-eu given up: %+v %v %v, want epoch 2", lb, ok, err)
	}
	errs := make(chan error, 3)
	for _, f := range []*ClusterLease{&la, &lq, nil} {
		go func() { errs <- a.Append(ctx, obs, f == nil, f) }()
	}
	fenced := 0
	for range 3 {
		switch err := <-errs; {
		case errors.Is(err, ErrClusterFenced):
			fenced++
		case err != nil:
			t.Fatal(err)
		}
	}
	if fenced != 1 {
		t.Fatalf("%d appends fenced, want the one under a's old lease on prod-eu", fenced)
	}
	if held, err := a.RenewClusters(ctx, []ClusterLease{la, lq}, time.Minute); err != nil || !slices.Equal(held, []ClusterLease{lq}) {
		t.Fatalf("renewed %v (%v), want qa alone", held, err)
	}
	if err := b.Append(ctx, obs, false, &lb); err != nil {
		t.Fatalf("b's append under its lease: %v", err)
	}
	in, _, err := tail(a.Tail(ctx, Position{}, 100))
	if err != nil || len(in) != 4 {
		t.Fatalf("%d entries in the inbox (%v), want 4: a's first, qa's, the event, b's", len(in), err)
	}

	// b's row expires: a sees a alone, and each lease as it stands.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sh, err = a.Share(ctx, "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(sh.Replicas, []string{"a"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's row never expired: %+v", sh)
		}
		time.Sleep(20 * time.Millisecond) // the database's clock must pass the expiry
	}
	if got := sh.Leases["prod-eu"]; got.Lease != lb.Lease || !got.Live || len(sh.Leases) != 2 {
		t.Fatalf("leases %+v, want prod-eu b's (epoch 2) and qa", sh.Leases)
	}
	if l, _, ok, err := b.Leader(ctx); err != nil || !ok || l.Holder != "a" {
		t.Fatalf("the leader's lease %+v %v %v, untouched by the clusters'", l, ok, err)
	}
	if err := a.Unshare(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if sh, err := b.Share(ctx, "b", time.Minute); err != nil || !slices.Equal(sh.Replicas, []string{"b"}) {
		t.Fatalf("after a left: %+v (%v), want b alone", sh.Replicas, err)
	}

	// A lease nobody held for an hour (its cluster's Secret removed) is
	// deleted by the next Share; one expired for less stays.
	if _, _, err := b.TakeCluster(ctx, "removed", "b", -2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.TakeCluster(ctx, "resting", "b", -30*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Share(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	sh, err = b.Share(ctx, "b", time.Minute)
	if _, kept := sh.Leases["removed"]; err != nil || kept || sh.Leases["resting"].Epoch != 1 || len(sh.Leases) != 3 {
		t.Fatalf("leases %+v (%v), want prod-eu, qa and resting: removed's deleted", sh.Leases, err)
	}
}
