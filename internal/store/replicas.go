package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// What several replicas on one PostgreSQL database share beyond the
// records: the inbox, where any replica puts the observations it
// acknowledges and the leader takes them from, and the live views the
// leader's commits decided, which every replica reads. bbolt has neither:
// one process is every part there.

// inboxVersion is the first byte of an inbox row: the observations'
// encoding (1: JSON, which a binary of another version reads too, as a
// rolling update needs).
const inboxVersion = 1

// Entry is one row of the inbox: observations acknowledged together.
type Entry struct {
	ID           int64
	Pos          Position // its place in the inbox's order
	Observations []rollout.Observation
	Event        bool // an event from notification-controller (else: read from the cluster)
}

// Append puts observations that belong together in the inbox as one
// entry (event: from notification-controller), and wakes the leader; once
// it returns they are committed. Any replica appends, concurrently: the
// appends under way in this process are written together, one statement
// and one commit (group commit), so that a burst costs a flush of the
// database's log, not one per event. What a cluster's reader read is
// appended under its lease on the cluster (fence, nil for none): checked
// in the statement that appends, so that a replica whose lease ran out
// appends nothing (ErrClusterFenced) once another took the cluster over.
func (c *Coordination) Append(ctx context.Context, obs []rollout.Observation, event bool, fence *ClusterLease) error {
	body, err := encodeInbox(obs)
	if err != nil {
		return err
	}
	req := &appendReq{body: append([]byte{inboxVersion}, body...), event: event, done: make(chan error, 1)}
	if fence != nil {
		req.fence = *fence
	}
	a := &c.p.appends
	a.mu.Lock()
	a.queue = append(a.queue, req)
	lead := !a.leading
	a.leading = true
	a.mu.Unlock()
	if lead {
		a.lead(c.p)
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// Not written if not taken yet: its caller, told it failed,
		// would append it again (a reader whose lease ended, a request
		// given up), and a queue that keeps what nobody waits for grows
		// while the database is slow.
		a.mu.Lock()
		if i := slices.Index(a.queue, req); i >= 0 {
			a.queue = slices.Delete(a.queue, i, i+1)
		}
		a.mu.Unlock()
		return ctx.Err()
	}
}

// appender groups the appends of one process.
type appender struct {
	mu      sync.Mutex
	queue   []*appendReq
	leading bool
}

type appendReq struct {
	body  []byte
	event bool
	fence ClusterLease // zero: none
	done  chan error
}

// maxAppend and maxAppendBytes bound one group: its statement's size,
// and the wait of the first append in it. An event's body is a few
// hundred bytes; a cluster reader's batch, a source's every layer with
// their releases, hundreds of KB: 512 of those in one statement outlast
// its timeout, the whole group fails, and every one of them is appended
// again.
const (
	maxAppend      = 512
	maxAppendBytes = 4 << 20
)

// groupSize is how many of the queue's first appends make one group: at
// least one, at most maxAppend, and no more than maxAppendBytes of bodies
// past the first.
func groupSize(queue []*appendReq) int {
	n, size := 0, 0
	for n < len(queue) && n < maxAppend && (n == 0 || size+len(queue[n].body) <= maxAppendBytes) {
		size += len(queue[n].body)
		n++
	}
	return n
}

// lead writes the queued appends as one group, the caller's among them,
// and hands on to another goroutine when more wait: the caller answers
// its client without waiting for later groups.
func (a *appender) lead(p *pgBackend) {
	a.mu.Lock()
	n := groupSize(a.queue)
	group := a.queue[:n:n]
	a.queue = append([]*appendReq(nil), a.queue[n:]...)
	a.mu.Unlock()
	events, bodies := make([]bool, n), make([][]byte, n)
	fenced := false
	for i, r := range group {
		events[i], bodies[i] = r.event, r.body
		fenced = fenced || r.fence.Cluster != ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	var (
		err     error
		refused []int64 // the fenced ones not appended, by ordinal from 1
	)
	if !fenced {
		_, err = p.pool.Exec(ctx, `WITH e AS (INSERT INTO fdn_inbox (event, body) SELECT * FROM unnest($1::boolean[], $2::bytea[]))
			SELECT pg_notify('fdn_inbox', '')`, events, bodies)
	} else {
		names, holders, epochs := make([]string, n), make([]string, n), make([]int64, n)
		for i, r := range group {
			if r.fence.Cluster != "" {
				names[i], holders[i], epochs[i] = clusterLeaseName(r.fence.Cluster), r.fence.Holder, r.fence.Epoch
			}
		}
		// The lease rows are locked until the commit (FOR SHARE): a
		// replica taking a cluster over waits for it, and once it has,
		// this check fails for the lease it ended.
		err = p.pool.QueryRow(ctx, `WITH u AS (SELECT * FROM unnest($1::boolean[], $2::bytea[], $3::text[], $4::text[], $5::bigint[])
				WITH ORDINALITY AS u (event, body, name, holder, epoch, i)),
			held AS (SELECT u.i FROM u JOIN fdn_leader l ON l.name = u.name
				WHERE l.holder = u.holder AND l.epoch = u.epoch AND l.expires > now() FOR SHARE OF l),
			ok AS (SELECT u.* FROM u WHERE u.name = '' OR u.i IN (SELECT i FROM held)),
			e AS (INSERT INTO fdn_inbox (event, body) SELECT event, body FROM ok ORDER BY i)
			SELECT r.refused FROM pg_notify('fdn_inbox', ''),
				(SELECT coalesce(array_agg(u.i), '{}') AS refused FROM u WHERE u.name <> '' AND u.i NOT IN (SELECT i FROM held)) r`,
			events, bodies, names, holders, epochs).Scan(&refused)
	}
	cancel()
	for i, r := range group {
		switch {
		case err != nil:
			r.done <- err
		case slices.Contains(refused, int64(i+1)):
			r.done <- ErrClusterFenced
		default:
			r.done <- nil
		}
	}
	a.mu.Lock()
	if len(a.queue) == 0 {
		a.leading = false
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	go a.lead(p)
}

// Position is a place in the inbox's order: every replica reads the
// entries in the order of the transactions that appended them (their
// xid8), then of their ids. The zero Position is before every entry.
type Position struct {
	Xid uint64
	ID  int64
}

// Before reports whether p is before q in the inbox's order.
func (p Position) Before(q Position) bool {
	return p.Xid < q.Xid || p.Xid == q.Xid && p.ID < q.ID
}

// Page is what a read of the inbox (Tail) returns.
type Page struct {
	// Entries are those after the position read from, in the inbox's
	// order.
	Entries []Entry
	// Held says that entries were committed after these that could not
	// be returned yet: read again soon, not at the next notification.
	Held bool
	// Log is the log's state, read after the entries: it covers them
	// (LogState).
	Log LogState
}

// Tail returns up to limit entries after from, in the inbox's order, with
// the log's state, in one round trip. It returns only entries of
// transactions older than every one still running: a transaction still
// running may commit an entry that comes before the later ones, so a
// reader that took those would skip it (Page.Held then says so). An entry
// stays until Trim: a leader that dies before its commit leaves it to the
// next, which applies it again (applying is idempotent).
func (c *Coordination) Tail(ctx context.Context, from Position, limit int) (Page, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	var b pgx.Batch
	// One snapshot for the horizon and the rows: a row of a transaction
	// below the horizon is visible in it, and none can come after. A row
	// of id 0 (ids start at 1) says that others are held behind it. The
	// horizon is the oldest transaction still running, but for those
	// known to run in another database (a server's transaction ids are
	// shared by its databases: another application's long transaction
	// would hold the inbox back while it lasts). One whose database is not
	// known (not yet in pg_stat_activity's copy, or hidden) holds it back.
	b.Queue(`WITH s AS (SELECT pg_current_snapshot() AS snap),
		h AS (SELECT coalesce(
			(SELECT min(x) FROM s, pg_snapshot_xip(s.snap) AS x WHERE NOT EXISTS (
				SELECT 1 FROM pg_stat_activity a
				WHERE a.backend_xid = (x::text::bigint % 4294967296)::text::xid
					AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()))),
			(SELECT pg_snapshot_xmax(snap) FROM s)) AS xmin)
		(SELECT id, xid, event, body FROM fdn_inbox, h WHERE (xid, id) > ($1::xid8, $2::bigint) AND xid < h.xmin ORDER BY xid, id LIMIT $3)
		UNION ALL
		(SELECT 0, xid, false, NULL FROM fdn_inbox, h WHERE xid >= h.xmin LIMIT 1)`, from.Xid, from.ID, limit)
	// The state in a statement after the rows' (Log).
	b.Queue(logState)
	br := c.p.pool.SendBatch(ctx, &b)
	var (
		p   Page
		bad *UnreadableError
	)
	rows, err := br.Query()
	if err == nil {
		p.Entries, p.Held, bad, err = scanTail(rows)
	}
	if err == nil {
		err = br.QueryRow().Scan(p.Log.fields()...)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return Page{}, err
	case bad != nil && len(p.Entries) == 0:
		return Page{}, bad
	case bad != nil:
		// The entries before it: the next read starts at it.
		p.Held = false
	}
	return p, nil
}

// scanTail reads Tail's rows, up to the first entry this binary cannot
// read, and closes them.
func scanTail(rows pgx.Rows) (entries []Entry, held bool, bad *UnreadableError, err error) {
	defer rows.Close()
	for rows.Next() {
		var (
			e    Entry
			body []byte
		)
		if err := rows.Scan(&e.ID, &e.Pos.Xid, &e.Event, &body); err != nil {
			return nil, false, nil, err
		}
		if e.ID == 0 {
			held = true
			continue
		}
		e.Pos.ID = e.ID
		if len(body) == 0 || body[0] != inboxVersion {
			return entries, held, &UnreadableError{ID: e.ID, Newer: len(body) > 0 && body[0] > inboxVersion,
				Err: errors.New("unknown encoding")}, nil
		}
		if e.Observations, err = decodeInbox(body[1:]); err != nil {
			return entries, held, &UnreadableError{ID: e.ID, Err: err}, nil
		}
		entries = append(entries, e)
	}
	return entries, held, nil, rows.Err()
}

// Read records that replica has read the inbox up to at: the leader
// trims no entry after it while the replica reads on.
func (c *Coordination) Read(ctx context.Context, replica string, at Position) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `INSERT INTO fdn_readers (replica, xid, id, seen) VALUES ($1, $2, $3, now())
		ON CONFLICT (replica) DO UPDATE SET xid = excluded.xid, id = excluded.id, seen = excluded.seen`, replica, at.Xid, at.ID)
	return err
}

// Trim deletes the inbox's entries up to upTo (the leader's: those it
// committed) that every reader seen within live has read too, records
// upTo as how far the leader took the inbox (InboxDepth), and returns how
// far the inbox is trimmed. A reader not seen for longer
// (stopped, or paused) holds nothing back: it finds the log trimmed past
// where it read (Trimmed), and loads again. It needs no fence: upTo
// covers only entries whose commits were fenced, so a leader paused past
// its term trims only what its successor loaded committed.
func (c *Coordination) Trim(ctx context.Context, upTo Position, live time.Duration) (Position, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	// One round trip, the pump waiting on it. Not waiting for the log's
	// flush: a delete lost in a crash applies its entries again, which
	// changes nothing; waiting would be one more flush the replicas'
	// appends queue behind.
	var b pgx.Batch
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit = off`)
	// The mark: the least of upTo and where each live reader is.
	b.Queue(`WITH mark AS (
			SELECT xid, id FROM (
				SELECT xid, id FROM fdn_readers WHERE seen > now() - $3::bigint * interval '1 millisecond'
				UNION ALL SELECT $1::xid8, $2::bigint) p
			ORDER BY xid, id LIMIT 1),
		trimmed AS (DELETE FROM fdn_inbox WHERE (xid, id) <= (SELECT xid, id FROM mark)),
		taken AS (INSERT INTO fdn_trimmed (name, xid, id) VALUES ('taken', $1, $2)
			ON CONFLICT (name) DO UPDATE SET (xid, id) = (excluded.xid, excluded.id)
				WHERE (fdn_trimmed.xid, fdn_trimmed.id) < (excluded.xid, excluded.id))
		INSERT INTO fdn_trimmed (name, xid, id) SELECT 'inbox', xid, id FROM mark
		ON CONFLICT (name) DO UPDATE SET (xid, id) = (excluded.xid, excluded.id)
			WHERE (fdn_trimmed.xid, fdn_trimmed.id) < (excluded.xid, excluded.id)
		RETURNING xid, id`, upTo.Xid, upTo.ID, live.Milliseconds())
	b.Queue(`COMMIT`)
	br := c.p.pool.SendBatch(ctx, &b)
	var at Position
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&at.Xid, &at.ID)
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		if _, cerr := br.Exec(); cerr != nil {
			err = cerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Trimmed further already (a leader before this one): no row
		// updated, and nothing after that deleted.
		return c.Trimmed(ctx)
	}
	return at, err
}

// ForgetReaders deletes the rows of readers not seen for gone: each
// process reads under a name of its own, so the rows would pile up with
// the restarts. One that comes back writes its row again, and finds the
// log trimmed past where it read. Apart from Trim, which the pump waits
// on, and which only reads the readers' rows.
func (c *Coordination) ForgetReaders(ctx context.Context, gone time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `DELETE FROM fdn_readers WHERE seen < now() - $1::bigint * interval '1 millisecond'`, gone.Milliseconds())
	return err
}

// Trimmed returns how far the inbox is trimmed: a reader that read less
// missed entries, and a leader's term takes the inbox from there.
func (c *Coordination) Trimmed(ctx context.Context) (Position, error) {
	s, err := c.Log(ctx)
	return s.Trimmed, err
}

// UnreadableError is an inbox entry this binary cannot read: written by a
// newer one (Newer), or damaged. It stays in the inbox, and the entries
// after it wait behind it: the inbox's order is the events'.
type UnreadableError struct {
	ID    int64
	Newer bool
	Err   error
}

func (e *UnreadableError) Error() string {
	if e.Newer {
		return fmt.Sprintf("inbox entry %d was written by a newer version of the service: a replica of that version must lead", e.ID)
	}
	return fmt.Sprintf("inbox entry %d cannot be read: %v", e.ID, e.Err)
}

// inboxObservation is an observation as the inbox keeps it: JSON, and the
// emitters' roles, which their JSON leaves out.
type inboxObservation struct {
	rollout.Observation
	EmitterRole rollout.Role
	LayerRole   rollout.Role   `json:",omitempty"`
	HoldRoles   []rollout.Role `json:",omitempty"`
}

func encodeInbox(obs []rollout.Observation) ([]byte, error) {
	out := make([]inboxObservation, len(obs))
	for i, o := range obs {
		out[i] = inboxObservation{Observation: o, EmitterRole: o.Emitter.Role, LayerRole: o.Layer.Role}
		for _, h := range o.Holds {
			out[i].HoldRoles = append(out[i].HoldRoles, h.Role)
		}
	}
	return json.Marshal(out)
}

func decodeInbox(b []byte) ([]rollout.Observation, error) {
	var in []inboxObservation
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	out := make([]rollout.Observation, len(in))
	for i, o := range in {
		if len(o.HoldRoles) != len(o.Holds) {
			return nil, errors.New("the releases held and their roles differ")
		}
		out[i] = o.Observation
		out[i].Emitter.Role, out[i].Layer.Role = o.EmitterRole, o.LayerRole
		for j := range out[i].Holds {
			out[i].Holds[j].Role = o.HoldRoles[j]
		}
	}
	return out, nil
}

// Ping reports whether PostgreSQL answers now: a replica that cannot
// reach it can neither take events nor read what settled.
func (c *Coordination) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	return c.p.pool.Ping(ctx)
}

// InboxDepth is how many entries wait in the inbox for the leader: those
// after the last position a leader trimmed up to (the entries it took,
// which stay until every reader read them too, are not waiting).
func (c *Coordination) InboxDepth(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	var n int
	err := c.p.pool.QueryRow(ctx, `SELECT count(*) FROM fdn_inbox
		WHERE (xid, id) > coalesce((SELECT (xid, id) FROM fdn_trimmed WHERE name = 'taken'), ('0'::xid8, 0::bigint))`).Scan(&n)
	return n, err
}

// LogState is what a reader of the inbox checks of it, besides its
// entries: whether it may go on from where it read.
type LogState struct {
	// Trimmed is how far the inbox is trimmed: a reader that read less
	// missed entries.
	Trimmed Position
	// Epoch is the lease's term, Keeper the last term whose leader keeps
	// the inbox for its readers (marked when the term is taken, by
	// Campaign). A leader of a release before the log was kept for
	// readers (schema 3) deletes what it takes at once: a reader cannot
	// follow the log under it.
	Epoch, Keeper int64
}

// Kept reports whether the lease's term is one whose leader keeps the
// log for its readers.
func (s LogState) Kept() bool { return s.Epoch == s.Keeper }

// fields are where a row of logState is scanned to.
func (s *LogState) fields() []any {
	return []any{&s.Trimmed.Xid, &s.Trimmed.ID, &s.Epoch, &s.Keeper}
}

const logState = `SELECT
	coalesce((SELECT xid FROM fdn_trimmed WHERE name = 'inbox'), '0'),
	coalesce((SELECT id FROM fdn_trimmed WHERE name = 'inbox'), 0),
	coalesce((SELECT epoch FROM fdn_leader WHERE name = 'leader'), 0),
	coalesce((SELECT id FROM fdn_trimmed WHERE name = 'keeper'), 0)`

// Log returns the inbox's state. Read after entries, it covers them: the
// mark only grows, so a mark at or before where the reader read, read
// after the entries, was so when they were read. Tail returns it with its
// entries.
func (c *Coordination) Log(ctx context.Context) (LogState, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	var s LogState
	err := c.p.pool.QueryRow(ctx, logState).Scan(s.fields()...)
	return s, err
}

// Vacuum makes the space of the rows the leader's work left dead in
// tables reusable now: each event is an inbox row inserted and deleted
// within milliseconds, and a version of its layer's evidence row and of
// its rollout's view; at a burst's rate these outrun autovacuum, which
// visits a database about once a minute, and the files would grow by the
// burst's rows instead of by what is live. The leader calls it every so
// many events: the inbox (small, all of it dead) often, the others less.
func (c *Coordination) Vacuum(ctx context.Context, tables ...Table) error {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = string(t)
	}
	_, err := c.p.pool.Exec(ctx, `VACUUM `+strings.Join(names, ", "))
	return err
}

// Table is a table the leader vacuums.
type Table string

const (
	TableInbox Table = "fdn_inbox"
	TableKV    Table = "fdn_kv"
	TableViews Table = "fdn_views"
)

// The live views: one row a rollout, its view encoded as a settled
// record, and a version from one sequence that every change takes. A
// rollout that left (settled or collected) keeps a row without a view for
// viewsKept, so that a replica reading changes since its last version
// learns it left. Only the leader writes, one transaction at a time and
// fenced, so versions are committed in their order: a reader that has
// everything up to version v never misses a lower one later.
const viewsKept = time.Hour

// viewsFloor names the sequence row holding the highest version of a
// removal forgotten: a replica behind it reads every view again.
var viewsFloor = []byte("views-floor")

// purgeViews forgets the removals older than viewsKept, raising the
// floor below which a replica reads every view again.
func (t *pgTx) purgeViews() {
	t.queue(`WITH gone AS (DELETE FROM fdn_views WHERE view IS NULL AND changed < now() - $1::bigint * interval '1 millisecond' RETURNING version)
		INSERT INTO fdn_sequence (bucket, value) SELECT $2::text, max(version) FROM gone HAVING count(*) > 0
		ON CONFLICT (bucket) DO UPDATE SET value = greatest(fdn_sequence.value, excluded.value)`,
		viewsKept.Milliseconds(), string(viewsFloor))
}

// WriteViews shows views to every replica in place of the ones before,
// and removes the rollouts removed, as a leader of 8ec1646 and earlier did
// after its commits: this release's leaders write no views (replica's
// begin), its followers read those such a leader writes (ViewsSince), and
// the tests write them as that leader did. Fenced as every write; one
// statement each, however many.
func (c *Coordination) WriteViews(views []*rollout.View, removed []rollout.Key) error {
	return c.writeViews(views, removed, false)
}

// ReplaceViews makes views the live ones, every other removed: what a new
// leader of 8ec1646 and earlier wrote of what its engine loaded
// (WriteViews). It is fenced as every write.
func (c *Coordination) ReplaceViews(views []*rollout.View) error {
	return c.writeViews(views, nil, true)
}

func (c *Coordination) writeViews(views []*rollout.View, removed []rollout.Key, replace bool) error {
	enc := make([][]byte, len(views))
	clusters, hashes := make([]string, len(views)), make([]string, len(views))
	for i, v := range views {
		var err error
		if enc[i], err = c.d.records.encodeSettled(v); err != nil {
			return err
		}
		clusters[i], hashes[i] = v.Cluster, v.Hash
	}
	rc, rh := make([]string, len(removed)), make([]string, len(removed))
	for i, k := range removed {
		rc[i], rh[i] = k.Cluster, k.Hash
	}
	return c.p.update(func(tx txn) error {
		t := tx.(*pgTx)
		if replace {
			t.queue(`UPDATE fdn_views SET version = nextval('fdn_views_version'), changed = now(), view = NULL
				WHERE view IS NOT NULL AND (cluster, hash) NOT IN (SELECT * FROM unnest($1::text[], $2::text[]))`, clusters, hashes)
		}
		if len(removed) > 0 {
			t.queue(`UPDATE fdn_views SET version = nextval('fdn_views_version'), changed = now(), view = NULL
				WHERE view IS NOT NULL AND (cluster, hash) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, rc, rh)
		}
		if len(views) > 0 {
			t.queue(`INSERT INTO fdn_views (cluster, hash, version, view)
				SELECT c, h, nextval('fdn_views_version'), v FROM unnest($1::text[], $2::text[], $3::bytea[]) AS u(c, h, v)
				ON CONFLICT (cluster, hash) DO UPDATE SET version = excluded.version, changed = now(), view = excluded.view`,
				clusters, hashes, enc)
		}
		t.queue(`SELECT pg_notify('fdn_views', '')`)
		return nil
	})
}

// ViewChanges are the live views' changes after a version.
type ViewChanges struct {
	Views   []*rollout.View
	Removed []rollout.Key
	// Reset: Views are every live view, to show in place of all others
	// (the version asked for is older than the removals kept).
	Reset bool
	// Version is the last version read: ask for changes after it next.
	Version int64
}

// ViewsSince returns the changes of the live views after version (all of
// them when version is 0), in one snapshot.
func (c *Coordination) ViewsSince(ctx context.Context, version int64) (ViewChanges, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	out := ViewChanges{Version: version}
	err := pgx.BeginTxFunc(ctx, c.p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var floor int64
		err := tx.QueryRow(ctx, `SELECT value FROM fdn_sequence WHERE bucket = $1`, string(viewsFloor)).Scan(&floor)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		q := `SELECT cluster, hash, version, view FROM fdn_views WHERE version > $1 ORDER BY version`
		if version == 0 || version < floor {
			out.Reset = true
			q = `SELECT cluster, hash, version, view FROM fdn_views WHERE view IS NOT NULL AND version > $1 ORDER BY version`
			version = 0
		}
		rows, err := tx.Query(ctx, q, version)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k rollout.Key
			var v int64
			var rec []byte
			if err := rows.Scan(&k.Cluster, &k.Hash, &v, &rec); err != nil {
				return err
			}
			out.Version = max(out.Version, v)
			if rec == nil {
				if !out.Reset {
					out.Removed = append(out.Removed, k)
				}
				continue
			}
			view, err := c.d.records.decodeSettled(rec)
			if err != nil {
				return fmt.Errorf("view of %s/%s: %w", k.Cluster, k.Hash, err)
			}
			out.Views = append(out.Views, view)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if out.Reset {
			// Versions up to the sequence's are taken; none lower can
			// commit after this snapshot (see viewsKept).
			return tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM fdn_views`).Scan(&out.Version)
		}
		return nil
	})
	return out, err
}

// The login form's wrong tokens, counted by every replica in one row: a
// window of a minute and its count.

// LoginFailures is how many wrong tokens the login form took in the
// minute under way.
func (c *Coordination) LoginFailures() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.p.timeout)
	defer cancel()
	var n int
	err := c.p.pool.QueryRow(ctx, `SELECT coalesce(max(failures), 0) FROM fdn_login
		WHERE name = 'login' AND since > now() - interval '1 minute'`).Scan(&n)
	return n, err
}

// LoginFailed counts a wrong token, in a new window when the last one is
// over. Any replica writes it: it is no leader's.
func (c *Coordination) LoginFailed() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `INSERT INTO fdn_login AS l (name, since, failures) VALUES ('login', now(), 1)
		ON CONFLICT (name) DO UPDATE SET
			since = CASE WHEN l.since > now() - interval '1 minute' THEN l.since ELSE now() END,
			failures = CASE WHEN l.since > now() - interval '1 minute' THEN l.failures + 1 ELSE 1 END`)
	return err
}
