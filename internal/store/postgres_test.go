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
	// An event acknowledged before the update, waiting in the inbox.
	body, err := encodeInbox([]rollout.Observation{inboxObs(1)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Exec(t, conn, fmt.Sprintf(`INSERT INTO fdn_inbox (event, body) VALUES (true, '\x%02x%x')`, inboxVersion, body))
	d := openReplica(t, conn, PostgresOptions{})
	if in, _, err := tail(d.Tail(context.Background(), Position{}, 10)); err != nil || len(in) != 1 || in[0].Observations[0].Hash != inboxObs(1).Hash {
		t.Fatalf("the inbox after the migration: %+v (%v), want the entry appended before it", in, err)
	}
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

// TestInbox: appends are read in their order, each with what it holds;
// an entry this binary cannot read holds up those after it, the ones
// before it read; trimmed entries deleted, and their space given back by
// Vacuum.
func TestInbox(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	d := openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	for i := range 3 {
		if err := d.Append(ctx, []rollout.Observation{inboxObs(i), inboxObs(i + 100)}, i%2 == 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	srv.Exec(t, conn, `INSERT INTO fdn_inbox (event, body) VALUES (true, '\x02')`)
	if err := d.Append(ctx, []rollout.Observation{inboxObs(9)}, true, nil); err != nil {
		t.Fatal(err)
	}
	in, held, err := tail(d.Tail(ctx, Position{}, 100))
	if err != nil || held || len(in) != 3 {
		t.Fatalf("read %d entries, held %v (%v), want the 3 before the unreadable one", len(in), held, err)
	}
	for i, e := range in {
		if len(e.Observations) != 2 || e.Observations[0].Hash != inboxObs(i).Hash || e.Observations[1].Hash != inboxObs(i+100).Hash || e.Event != (i%2 == 0) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if at, err := d.Trim(ctx, in[2].Pos, time.Minute); err != nil || at != in[2].Pos {
		t.Fatalf("trimmed to %+v (%v), want %+v", at, err, in[2].Pos)
	}
	var unreadable *UnreadableError
	if _, _, err := tail(d.Tail(ctx, Position{}, 100)); !errors.As(err, &unreadable) || !unreadable.Newer {
		t.Fatalf("the unreadable entry first: %v", err)
	}
	if n, err := d.InboxDepth(ctx); err != nil || n != 2 {
		t.Fatalf("depth %d (%v), want 2", n, err)
	}
	srv.Exec(t, conn, `DELETE FROM fdn_inbox WHERE body = '\x02'`)
	if in, _, err = tail(d.Tail(ctx, in[2].Pos, 100)); err != nil || len(in) != 1 || in[0].Observations[0].Hash != inboxObs(9).Hash {
		t.Fatalf("after it: %+v (%v)", in, err)
	}
	// A burst's rows, all taken: Vacuum gives their pages back.
	for range 20 {
		batch := make([]rollout.Observation, 200)
		for i := range batch {
			batch[i] = inboxObs(i)
		}
		if err := d.Append(ctx, batch, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, _, err := tail(d.Tail(ctx, Position{}, 100))
	if err != nil || len(all) != 21 {
		t.Fatalf("read %d entries (%v), want 21", len(all), err)
	}
	if _, err := d.Trim(ctx, all[len(all)-1].Pos, time.Minute); err != nil {
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

// TestAppendGivenUp: an append whose caller gave up before its group was
// taken is not written (its caller appends it again, or no longer
// needs it), and a queue of appends nobody waits for does not grow.
func TestAppendGivenUp(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	d := openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	// The inbox locked: the first append's statement waits.
	tx := openTx(t, conn)
	lock := tx.Conn()
	if _, err := tx.Exec(ctx, `LOCK TABLE fdn_inbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- d.Append(ctx, []rollout.Observation{inboxObs(1)}, true, nil) }()
	waiting := func() bool {
		var n int
		err := lock.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	}
	queued := func() int {
		a := &d.p.appends
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.queue)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !waiting() {
		if time.Now().After(deadline) {
			t.Fatal("the first append's statement does not wait for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	giveUp, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() { second <- d.Append(giveUp, []rollout.Observation{inboxObs(2)}, true, nil) }()
	for queued() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second append is not queued behind the first")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the append given up: %v", err)
	}
	if n := queued(); n != 0 {
		t.Fatalf("%d appends queued after the one given up", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The appender is done once no group is under way.
	for {
		a := &d.p.appends
		a.mu.Lock()
		leading := a.leading
		a.mu.Unlock()
		if !leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the appender still writes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	in, _, err := tail(d.Tail(ctx, Position{}, 100))
	if err != nil || len(in) != 1 || in[0].Observations[0].Hash != inboxObs(1).Hash {
		t.Fatalf("the inbox holds %+v (%v), want the first append alone", in, err)
	}
}

// TestGroupSize: a group takes up to maxAppend appends and, past its
// first, up to maxAppendBytes of bodies; never none.
func TestGroupSize(t *testing.T) {
	reqs := func(sizes ...int) []*appendReq {
		q := make([]*appendReq, len(sizes))
		for i, n := range sizes {
			q[i] = &appendReq{body: make([]byte, n)}
		}
		return q
	}
	small := make([]int, 600)
	for i := range small {
		small[i] = 300
	}
	for _, tt := range []struct {
		name  string
		queue []*appendReq
		want  int
	}{
		{"none", nil, 0},
		{"events", reqs(small...), maxAppend},
		{"readers' batches", reqs(1<<20, 1<<20, 1<<20, 1<<20, 1<<20), 4},
		{"one over the bound", reqs(10<<20, 300), 1},
		{"up to the bound", reqs(2<<20, 2<<20, 1), 2},
	} {
		if got := groupSize(tt.queue); got != tt.want {
			t.Errorf("%s: a group of %d, want %d", tt.name, got, tt.want)
		}
	}
}

// openTx is a transaction on a connection of its own to conn, rolled back
// (if still open) when the test ends.
func openTx(t *testing.T, conn string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

func inboxObs(i int) rollout.Observation {
	return rollout.Observation{Cluster: "prod", Hash: fmt.Sprintf("%040x", i), Revision: fmt.Sprintf("main@sha1:%040x", i)}
}

// TestInboxInCommitOrder: an entry whose transaction commits after a
// later one's (its id lower) is never skipped: a reader gets neither
// until it commits, and then both, in one order that every reader reads.
func TestInboxInCommitOrder(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a, b := openReplica(t, conn, PostgresOptions{}), openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	tx := openTx(t, conn)
	var id int64
	// Its id and transaction first; it commits after b's append.
	if err := tx.QueryRow(ctx, `SELECT nextval('fdn_inbox_id_seq'), pg_current_xact_id()`).Scan(&id, new(uint64)); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, []rollout.Observation{inboxObs(2)}, true, nil); err != nil {
		t.Fatal(err)
	}
	if in, held, err := tail(a.Tail(ctx, Position{}, 100)); err != nil || len(in) != 0 || !held {
		t.Fatalf("with an earlier append uncommitted: %d entries, held %v (%v); want none, held", len(in), held, err)
	}
	body, err := encodeInbox([]rollout.Observation{inboxObs(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fdn_inbox (id, event, body) VALUES ($1, true, $2)`, id, append([]byte{inboxVersion}, body...)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got [2][]string
	for i, r := range []replicaHandle{a, b} {
		in, held, err := tail(r.Tail(ctx, Position{}, 100))
		if err != nil || held {
			t.Fatalf("reader %d: held %v (%v)", i, held, err)
		}
		for _, e := range in {
			got[i] = append(got[i], e.Observations[0].Hash)
		}
	}
	want := []string{inboxObs(1).Hash, inboxObs(2).Hash}
	if !slices.Equal(got[0], want) || !slices.Equal(got[1], want) {
		t.Fatalf("read %v and %v, want both in the order of their transactions %v", got[0], got[1], want)
	}
}

// TestInboxNotHeldByAnotherDatabase: a transaction that runs long in
// another database of the server (another application's) holds no entry
// of the inbox back; one in the inbox's database does (it may append).
func TestInboxNotHeldByAnotherDatabase(t *testing.T) {
	srv := pgtest.Start(t)
	conn, other := srv.NewDatabase(t), srv.NewDatabase(t)
	a := openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	hold := func(conn string) pgx.Tx {
		tx := openTx(t, conn)
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()`).Scan(new(uint64)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	elsewhere := hold(other)
	if err := a.Append(ctx, []rollout.Observation{inboxObs(1)}, true, nil); err != nil {
		t.Fatal(err)
	}
	if in, held, err := tail(a.Tail(ctx, Position{}, 100)); err != nil || len(in) != 1 || held {
		t.Fatalf("with a transaction open in another database: %d entries, held %v (%v); want the one, not held", len(in), held, err)
	}
	here := hold(conn)
	if err := a.Append(ctx, []rollout.Observation{inboxObs(2)}, true, nil); err != nil {
		t.Fatal(err)
	}
	if in, held, err := tail(a.Tail(ctx, Position{}, 100)); err != nil || len(in) != 1 || !held {
		t.Fatalf("with a transaction open in the inbox's database: %d entries, held %v (%v); want the first alone, held", len(in), held, err)
	}
	for _, tx := range []pgx.Tx{here, elsewhere} {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if in, held, err := tail(a.Tail(ctx, Position{}, 100)); err != nil || len(in) != 2 || held {
		t.Fatalf("once both ended: %d entries, held %v (%v); want both", len(in), held, err)
	}
}

// TestTrimWaitsForReaders: the leader trims only what every live reader
// read; a reader not seen within live holds nothing back, and finds the
// inbox trimmed past it. A trim never moves the mark back.
func TestTrimWaitsForReaders(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a, b := openReplica(t, conn, PostgresOptions{}), openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	for i := range 3 {
		if err := a.Append(ctx, []rollout.Observation{inboxObs(i)}, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	in, _, err := tail(a.Tail(ctx, Position{}, 100))
	if err != nil || len(in) != 3 {
		t.Fatalf("%d entries (%v)", len(in), err)
	}
	if err := b.Read(ctx, "b", in[0].Pos); err != nil {
		t.Fatal(err)
	}
	if n, err := a.InboxDepth(ctx); err != nil || n != 3 {
		t.Fatalf("depth %d (%v) before the leader took any, want 3", n, err)
	}
	if at, err := a.Trim(ctx, in[1].Pos, time.Minute); err != nil || at != in[0].Pos {
		t.Fatalf("trimmed to %+v (%v), want where b read, %+v", at, err, in[0].Pos)
	}
	if n, err := a.InboxDepth(ctx); err != nil || n != 1 {
		t.Fatalf("depth %d (%v) once the leader took two, kept for b, want 1", n, err)
	}
	if st, err := b.Log(ctx); err != nil || st.Trimmed != in[0].Pos {
		t.Fatalf("b reads the log's state %+v (%v), want trimmed to %+v", st, err, in[0].Pos)
	}
	if p, err := b.Tail(ctx, in[0].Pos, 100); err != nil || p.Log.Trimmed != in[0].Pos || !p.Log.Kept() {
		t.Fatalf("b reads the log's state with its entries: %+v (%v), want trimmed to %+v, kept", p.Log, err, in[0].Pos)
	}
	if at, err := a.Trim(ctx, in[2].Pos, time.Minute); err != nil || at != in[0].Pos {
		t.Fatalf("trimmed to %+v (%v), want where b read, %+v", at, err, in[0].Pos)
	}
	if rest, _, err := tail(b.Tail(ctx, in[0].Pos, 100)); err != nil || len(rest) != 2 {
		t.Fatalf("b reads on: %d entries (%v), want 2", len(rest), err)
	}
	srv.Exec(t, conn, `UPDATE fdn_readers SET seen = now() - interval '1 hour'`)
	if at, err := a.Trim(ctx, in[2].Pos, time.Minute); err != nil || at != in[2].Pos {
		t.Fatalf("with b gone: trimmed to %+v (%v), want %+v", at, err, in[2].Pos)
	}
	if at, err := b.Trimmed(ctx); err != nil || !in[0].Pos.Before(at) {
		t.Fatalf("b finds the inbox trimmed to %+v (%v): not past where it read", at, err)
	}
	if at, err := a.Trim(ctx, in[1].Pos, time.Minute); err != nil || at != in[2].Pos {
		t.Fatalf("a trim behind the mark: %+v (%v), want the mark kept at %+v", at, err, in[2].Pos)
	}
	readers := func() int {
		var n int
		if err := a.kv.(*pgBackend).pool.QueryRow(ctx, `SELECT count(*) FROM fdn_readers`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := a.ForgetReaders(ctx, 2*time.Hour); err != nil || readers() != 1 {
		t.Fatalf("%d readers' rows (%v), want b's kept: seen within two hours", readers(), err)
	}
	if err := a.ForgetReaders(ctx, 10*time.Minute); err != nil || readers() != 0 {
		t.Fatalf("%d readers' rows (%v), want b's gone: not seen for ten minutes", readers(), err)
	}
	if n, err := a.InboxDepth(ctx); err != nil || n != 0 {
		t.Fatalf("depth %d (%v)", n, err)
	}
}

// TestLogKept: a term taken by this release's Campaign is marked as one
// whose leader keeps the inbox for its readers; a term taken without the
// mark (a release before) is not, until one of this release is taken.
func TestLogKept(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	a, b := openReplica(t, conn, PostgresOptions{}), openReplica(t, conn, PostgresOptions{})
	ctx := context.Background()
	if st, err := b.Log(ctx); err != nil || st.Epoch != 0 || !st.Kept() {
		t.Fatalf("no lease ever taken: %+v (%v), want kept (no leader deletes anything)", st, err)
	}
	l := campaignUntil(t, a.Coordination, "a", time.Minute)
	if st, err := b.Log(ctx); err != nil || st.Epoch != l.Epoch || !st.Kept() {
		t.Fatalf("after this release's campaign: %+v (%v), want epoch %d kept", st, err, l.Epoch)
	}
	srv.Exec(t, conn, `UPDATE fdn_leader SET holder = 'old', epoch = epoch + 1, expires = now() + interval '1 minute'`)
	if st, err := b.Log(ctx); err != nil || st.Kept() {
		t.Fatalf("a term taken without the mark: %+v (%v), want not kept", st, err)
	}
	srv.Exec(t, conn, `UPDATE fdn_leader SET expires = now()`)
	l = campaignUntil(t, b.Coordination, "b", time.Minute)
	if st, err := a.Log(ctx); err != nil || st.Epoch != l.Epoch || !st.Kept() {
		t.Fatalf("a term of this release again: %+v (%v), want epoch %d kept", st, err, l.Epoch)
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

// tail is Tail as most of these tests read it: the entries, and whether
// more are held.
func tail(p Page, err error) ([]Entry, bool, error) { return p.Entries, p.Held, err }
