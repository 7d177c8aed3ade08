package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestPostgresSchema: opening creates the schema once (a second open, and
// two at once, change nothing); a schema or records newer than this binary
// knows are refused with a clear error, as bbolt's file is; the
// connection string's password never shows in an error.
func TestPostgresSchema(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	done := make(chan *DB, 2)
	for range 2 {
		go func() {
			d, _, err := OpenPostgres(context.Background(), conn, PostgresOptions{})
			if err != nil {
				t.Error(err)
			}
			done <- d
		}()
	}
	for range 2 {
		if d := <-done; d != nil {
			d.Close()
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	open := func() error {
		d, _, err := OpenPostgres(context.Background(), conn, PostgresOptions{})
		if err == nil {
			d.Close()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("opening again: %v", err)
	}
	srv.Exec(t, conn, `UPDATE fdn_kv SET value = '\x39' WHERE bucket = 'meta' AND key = '\x736368656d61'`) // schema "9"
	if err := open(); err == nil || !strings.Contains(err.Error(), `schema "9", this binary reads "8"`) {
		t.Fatalf("newer records: %v", err)
	}
	srv.Exec(t, conn, `UPDATE fdn_schema SET version = 99`)
	if err := open(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("PostgreSQL schema 99, this binary knows %d", len(migrations))) {
		t.Fatalf("a newer schema: %v", err)
	}
	if _, _, err := OpenPostgres(context.Background(), "postgres://u:s3cret@%zz/db", PostgresOptions{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a bad connection string: %v", err)
	}
	if _, _, err := OpenPostgres(context.Background(), conn+" password=s3cret user=nobody", PostgresOptions{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a refused login: %v", err)
	}
}

// TestPostgresMigrates: a database of schema 1 (as its first binary left
// it) is migrated to the latest at start, once.
func TestPostgresMigrates(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	srv.Exec(t, conn, migrations[0]+`; CREATE TABLE fdn_schema (version integer NOT NULL); INSERT INTO fdn_schema VALUES (1)`)
	openReplica(t, conn, PostgresOptions{})
	c, err := pgx.Connect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var (
		versions []int
		opts     []string
	)
	rows, _ := c.Query(context.Background(), `SELECT version FROM fdn_schema`)
	if versions, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil || !slices.Equal(versions, []int{len(migrations)}) {
		t.Fatalf("schema versions %v (%v), want [%d]", versions, err, len(migrations))
	}
	if err := c.QueryRow(context.Background(), `SELECT reloptions FROM pg_class WHERE relname = 'fdn_kv'`).Scan(&opts); err != nil || !slices.Contains(opts, "fillfactor=80") {
		t.Fatalf("fdn_kv's options %v (%v): migration 2 not applied", opts, err)
	}
}

// TestInbox: appends are taken in their order, each with what it holds;
// an entry this binary cannot read holds up those after it, the ones
// before it taken; taken entries deleted, and their space given back by
// Vacuum.
func TestInbox(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	d := openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	obs := func(i int) rollout.Observation {
		return rollout.Observation{Cluster: "prod", Hash: fmt.Sprintf("%040x", i), Revision: fmt.Sprintf("main@sha1:%040x", i)}
	}
	for i := range 3 {
		if err := d.Append(ctx, []rollout.Observation{obs(i), obs(i + 100)}, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	srv.Exec(t, conn, `INSERT INTO fdn_inbox (event, body) VALUES (true, '\x02')`)
	if err := d.Append(ctx, []rollout.Observation{obs(9)}, true); err != nil {
		t.Fatal(err)
	}
	in, err := d.Inbox(ctx, 100)
	if err != nil || len(in) != 3 {
		t.Fatalf("took %d entries (%v), want the 3 before the unreadable one", len(in), err)
	}
	for i, e := range in {
		if len(e.Observations) != 2 || e.Observations[0].Hash != obs(i).Hash || e.Observations[1].Hash != obs(i+100).Hash || e.Event != (i%2 == 0) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if err := d.Consumed(ctx, []int64{in[0].ID, in[1].ID, in[2].ID}); err != nil {
		t.Fatal(err)
	}
	var unreadable *UnreadableError
	if _, err := d.Inbox(ctx, 100); !errors.As(err, &unreadable) || !unreadable.Newer {
		t.Fatalf("the unreadable entry first: %v", err)
	}
	if n, err := d.InboxDepth(ctx); err != nil || n != 2 {
		t.Fatalf("depth %d (%v), want 2", n, err)
	}
	srv.Exec(t, conn, `DELETE FROM fdn_inbox WHERE body = '\x02'`)
	if in, err = d.Inbox(ctx, 100); err != nil || len(in) != 1 || in[0].Observations[0].Hash != obs(9).Hash {
		t.Fatalf("after it: %+v (%v)", in, err)
	}
	// A burst's rows, all taken: Vacuum gives their pages back.
	for range 20 {
		batch := make([]rollout.Observation, 200)
		for i := range batch {
			batch[i] = obs(i)
		}
		if err := d.Append(ctx, batch, true); err != nil {
			t.Fatal(err)
		}
	}
	all, err := d.Inbox(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(all))
	for i, e := range all {
		ids[i] = e.ID
	}
	if err := d.Consumed(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if err := d.Vacuum(ctx, TableInbox, TableKV, TableViews); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var pages int64
	if err := c.QueryRow(ctx, `SELECT pg_relation_size('fdn_inbox') / current_setting('block_size')::int`).Scan(&pages); err != nil || pages != 0 {
		t.Fatalf("the inbox keeps %d pages after its rows were taken and vacuumed (%v)", pages, err)
	}
}

// TestListenerHoldsNoSnapshot: a listener whose owner does not wait (a
// leader busy with its inbox) still reads every notification, so that its
// backend never blocks sending them, holding a snapshot that keeps every
// dead row in the database from being vacuumed.
func TestListenerHoldsNoSnapshot(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	d := openReplica(t, conn, PostgresOptions{Application: "listener-test"})
	ctx := context.Background()
	l, err := d.Listen(ctx, "fdn_inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// Megabytes of notifications, more than the socket's buffers hold,
	// and nobody waiting.
	for range 5 {
		if _, err := c.Exec(ctx, `SELECT pg_notify('fdn_inbox', repeat('x', 200) || i) FROM generate_series(1, 5000) AS i`); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var held int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND backend_xmin IS NOT NULL`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener's backend holds a snapshot 20 s after the notifications: it blocks sending them")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := l.Wait(ctx, 5*time.Second); !ok || err != nil {
		t.Fatalf("Wait after the notifications: %v, %v", ok, err)
	}
}
