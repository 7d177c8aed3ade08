package replica_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

// deadLeader takes the lease for a holder that never renews nor resigns,
// for a minute: a leader killed, whose lease has not run out yet. It
// takes it as this release does, marking its term as one that keeps the
// inbox for its readers.
func deadLeader(t *testing.T, conn string) *store.Coordination {
	t.Helper()
	db, co, err := store.OpenPostgres(context.Background(), conn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, ok, err := co.Campaign(context.Background(), "killed", time.Minute); err != nil || !ok {
		t.Fatalf("take the lease: %v, %v", ok, err)
	}
	return co
}

func count(t *testing.T, conn, sql string) int {
	t.Helper()
	c, err := pgx.Connect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFollowerShowsWhileNoneLeads: while no replica leads (the leader
// killed, its lease not run out), what a follower acknowledges shows in
// its own answers, as the leader would decide it, and it writes nothing
// but the inbox: no evidence, no mail.
func TestFollowerShowsWhileNoneLeads(t *testing.T) {
	conn := pgtest.Start(t).NewDatabase(t)
	deadLeader(t, conn)
	b := start(t, conn, "b")
	waitFor(t, "b to catch up", b.node.CaughtUp)
	records := count(t, conn, `SELECT count(*) FROM fdn_kv`)
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, o := range obs {
		if err := b.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b to show what it acknowledged", shows(b, decided(t, obs)))
	if b.node.Leading() {
		t.Fatal("b leads under a lease it does not hold")
	}
	if n := count(t, conn, `SELECT count(*) FROM fdn_kv`); n != records {
		t.Fatalf("the follower wrote records: %d, were %d", n, records)
	}
	if n := count(t, conn, `SELECT count(*) FROM fdn_inbox`); n != len(obs) {
		t.Fatalf("%d inbox entries, want the %d acknowledged, kept for the next leader", n, len(obs))
	}
}

// TestFollowerUnderAnOlderLeader: under a leader of the release before,
// whose term carries no mark that it keeps the inbox for its readers (it
// may delete what it takes at once), a follower shows the views that
// leader writes, not an engine of its own; once a term of this release
// begins, it applies the inbox, the entries it acknowledged meanwhile
// included.
func TestFollowerUnderAnOlderLeader(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	old := deadLeader(t, conn)
	// Taken over as a release before this one takes it: no mark.
	srv.Exec(t, conn, `UPDATE fdn_leader SET holder = 'old', epoch = epoch + 1, expires = now() + interval '1 minute'`)
	lease, _, _, err := old.Leader(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ref := enginetest.Start(t, t.TempDir(), cfg, time.Now, false)
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	half := len(obs) / 2
	for _, o := range obs[:half] {
		if err := ref.Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	old.Fence(&lease)
	if err := old.ReplaceViews(ref.Views()); err != nil {
		t.Fatal(err)
	}
	b := start(t, conn, "b")
	shown := obs[half-1].Hash
	waitFor(t, "b to show the older leader's views", func() bool {
		return b.node.CaughtUp() && verdict(b, shown) != rollout.VerdictUnknown
	})
	for _, o := range obs[half:] {
		if err := b.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	// The views are what b shows: what it acknowledged waits for a leader.
	if n := count(t, conn, `SELECT count(*) FROM fdn_inbox`); n != len(obs)-half {
		t.Fatalf("%d inbox entries, want %d", n, len(obs)-half)
	}
	last := obs[len(obs)-1].Hash
	if verdict(b, last) != rollout.VerdictUnknown {
		t.Fatal("b applied the inbox under a leader that may not keep it")
	}
	// A term of this release: b follows the inbox.
	srv.Exec(t, conn, `UPDATE fdn_leader SET expires = now()`)
	deadLeader(t, conn)
	waitFor(t, "b to show what it acknowledged", func() bool { return verdict(b, last) != rollout.VerdictUnknown })
}

// TestFollowerLoadsAgainWhenTrimmedPast: a follower whose reads stopped
// for longer than a lease (its record of where it read held up here by a
// lock) is no longer waited for: the leader trims what it committed past
// where the follower read. The follower finds the inbox trimmed past its
// place, loads again, and shows what it would have missed.
func TestFollowerLoadsAgainWhenTrimmedPast(t *testing.T) {
	conn := pgtest.Start(t).NewDatabase(t)
	a := start(t, conn, "a")
	waitFor(t, "a to lead", a.node.Leading)
	var logged syncbuf.Buffer
	b := startLogged(t, conn, "b", slog.New(slog.NewTextHandler(&logged, nil)))
	waitFor(t, "b to catch up", b.node.CaughtUp)
	obs := enginetest.ExampleObservations(time.Now().Add(-time.Hour).Truncate(time.Second))
	half := len(obs) / 2
	for _, o := range obs[:half] {
		if err := a.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b to show the first half", func() bool { return verdict(b, obs[half-1].Hash) != rollout.VerdictUnknown })

	c, err := pgx.Connect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	tx, err := c.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A table lock: it takes no transaction id, which would hold back
	// every entry committed after it (Tail). The leader's trim only reads
	// the readers' rows.
	if _, err := tx.Exec(context.Background(), `LOCK TABLE fdn_readers IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's record of where it read to wait for the lock", func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO fdn_readers%'`) > 0
	})
	for _, o := range obs[half:] {
		if err := a.node.Events().Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	last := obs[len(obs)-1].Hash
	waitFor(t, "a to show the second half", func() bool { return verdict(a, last) != rollout.VerdictUnknown })
	waitFor(t, "the leader to trim what b did not read", func() bool {
		return count(t, conn, `SELECT count(*) FROM fdn_inbox`) == 0
	})
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to show the second half", func() bool { return verdict(b, last) == verdict(a, last) })
	if !strings.Contains(logged.String(), "trimmed past where this replica read") {
		t.Fatalf("b did not say it loads again:\n%s", logged.String())
	}
}
