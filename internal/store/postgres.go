package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL keeps the store's buckets in one table, fdn_kv, keyed by
// (bucket, key): bytea compares byte-wise, so a bucket's keys are ordered
// as bbolt orders them and a cursor is an index range scan. Each bucket's
// sequence is a row of fdn_sequence. The schema is versioned in
// fdn_schema (the SQL) and in the meta bucket (the records, as on bbolt).

// migrations are the schema's versions: migrations[i] takes a database of
// version i to version i+1. Only ever append.
var migrations = []string{
	`CREATE TABLE fdn_kv (
		bucket text NOT NULL,
		key bytea NOT NULL,
		value bytea NOT NULL,
		PRIMARY KEY (bucket, key)
	);
	CREATE TABLE fdn_sequence (
		bucket text PRIMARY KEY,
		value bigint NOT NULL
	);
	CREATE TABLE fdn_leader (
		name text PRIMARY KEY,
		holder text NOT NULL,
		epoch bigint NOT NULL,
		expires timestamptz NOT NULL
	);
	CREATE TABLE fdn_inbox (
		id bigserial PRIMARY KEY,
		received timestamptz NOT NULL DEFAULT now(),
		event boolean NOT NULL,
		body bytea NOT NULL
	);
	CREATE SEQUENCE fdn_views_version;
	CREATE TABLE fdn_views (
		cluster text NOT NULL,
		hash text NOT NULL,
		version bigint NOT NULL,
		changed timestamptz NOT NULL DEFAULT now(),
		view bytea,
		PRIMARY KEY (cluster, hash)
	);
	CREATE INDEX fdn_views_by_version ON fdn_views (version);
	-- Rows of the inbox live milliseconds, the evidence's and the views'
	-- are rewritten at every change: vacuumed early, their space is
	-- reused instead of growing the files.
	ALTER TABLE fdn_inbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_cost_delay = 0);
	ALTER TABLE fdn_kv SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
	ALTER TABLE fdn_views SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
	CREATE TABLE fdn_login (
		name text PRIMARY KEY,
		since timestamptz NOT NULL,
		failures integer NOT NULL
	);`,
	// Room in each page for the next version of its rows: an evidence
	// row rewritten (a layer's next event) stays on its page (a HOT
	// update), and the page's dead versions are pruned when it is next
	// written, without a vacuum or a new index entry.
	`ALTER TABLE fdn_kv SET (fillfactor = 80);
	ALTER TABLE fdn_views SET (fillfactor = 80);`,
	// The inbox as a log every replica can read in one order: by the
	// transaction that appended an entry, then its id (ids are taken
	// before their transactions commit, so id order alone lets a late
	// commit under a lower id slip behind a reader). Rows already there
	// take this migration's transaction: after none of the rows to come.
	// Each replica that reads the log says how far (fdn_readers); the
	// leader deletes only what every live reader read, and says how far
	// (fdn_trimmed): a reader behind that missed entries.
	`ALTER TABLE fdn_inbox ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
	CREATE INDEX fdn_inbox_in_order ON fdn_inbox (xid, id);
	CREATE TABLE fdn_readers (
		replica text PRIMARY KEY,
		xid xid8 NOT NULL,
		id bigint NOT NULL,
		seen timestamptz NOT NULL
	);
	CREATE TABLE fdn_trimmed (
		name text PRIMARY KEY,
		xid xid8 NOT NULL,
		id bigint NOT NULL
	);`,
}

// schemaLock serializes replicas creating or migrating the schema at once
// (pg_advisory_xact_lock's key: "fdn" and a version of the lock itself).
const schemaLock = 0x66646e01

// PostgresOptions are how the store connects.
type PostgresOptions struct {
	// Password, when not empty, is the password (--postgres-password-file);
	// otherwise libpq's rules apply (the connection string, PGPASSWORD,
	// PGPASSFILE).
	Password string
	// MaxConns bounds the pool; zero is pgx's default.
	MaxConns int32
	// Timeout bounds one transaction (a round trip to an unreachable
	// server ends with an error, not a wait); zero is 10 s.
	Timeout time.Duration
	// Application names this process in PostgreSQL's views
	// (pg_stat_activity's application_name), after the service's name.
	Application string
	// IdleInTransaction ends the session of a client that holds a
	// transaction open, idle, for longer (a paused process keeping the
	// leader's row locked); zero is 5 s.
	IdleInTransaction time.Duration
}

// parsePostgres reads a connection string (libpq keywords or a URL) with
// the options applied; its errors never repeat the string, which may hold
// a password.
func parsePostgres(conn string, opt PostgresOptions) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, errors.New("the PostgreSQL connection string does not parse (libpq keywords or a postgres:// URL)")
	}
	if opt.Password != "" {
		cfg.ConnConfig.Password = opt.Password
	}
	switch {
	case opt.MaxConns > 0:
		cfg.MaxConns = opt.MaxConns
	case !strings.Contains(conn, "pool_max_conns"):
		// pgx's default is the cores' count, at least 4: a replica's
		// appends, follower, and as leader its commits, inbox and
		// dispatchers each hold one at times.
		cfg.MaxConns = max(cfg.MaxConns, 8)
	}
	idle := opt.IdleInTransaction
	if idle == 0 {
		idle = 5 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(idle.Milliseconds())
	name := "flux-deploy-notifier"
	if opt.Application != "" {
		name += " " + opt.Application
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	return cfg, nil
}

// OpenPostgres opens the store in the PostgreSQL database conn (libpq
// keywords or a URL), creating or migrating its schema, and what several
// replicas on it share. A schema newer than this binary knows is refused.
// No error repeats conn, which may hold a password.
func OpenPostgres(ctx context.Context, conn string, opt PostgresOptions) (*DB, *Coordination, error) {
	cfg, err := parsePostgres(conn, opt)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	timeout := opt.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	pg := &pgBackend{pool: pool, timeout: timeout}
	if err := pg.migrate(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	d := &DB{kv: pg, purged: func(txn) {}}
	err = d.kv.update(func(tx txn) error {
		d.kept, err = initRecords(tx)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("init the records: %w", err)
	}
	c := &Coordination{p: pg, d: d}
	// Retention forgets the views' removals with the rest.
	d.purged = func(tx txn) { tx.(*pgTx).purgeViews() }
	return d, c, nil
}

type pgBackend struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	mu      sync.Mutex            // one write transaction at a time, as bbolt
	fence   atomic.Pointer[Lease] // when set, every write checks it
	// leased: writes need a lease (Fence); without one they fail, so that
	// a replica that is not the leader can write nothing by mistake.
	leased atomic.Bool
	// appends groups the inbox's appends of this process (replicas.go).
	appends appender
}

func (p *pgBackend) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
			return fmt.Errorf("lock the schema: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fdn_schema (version integer NOT NULL)`); err != nil {
			return fmt.Errorf("create the schema's version: %w", err)
		}
		var v int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM fdn_schema`).Scan(&v); err != nil {
			return fmt.Errorf("read the schema's version: %w", err)
		}
		if v > len(migrations) {
			return fmt.Errorf("PostgreSQL schema %d, this binary knows %d: run a newer binary", v, len(migrations))
		}
		for i := v; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migrate the schema to %d: %w", i+1, err)
			}
		}
		if v == len(migrations) {
			return nil
		}
		_, err := tx.Exec(ctx, `DELETE FROM fdn_schema; INSERT INTO fdn_schema VALUES (`+fmt.Sprint(len(migrations))+`)`)
		return err
	})
}

// view runs fn's reads on one connection, each a statement of its own,
// not in a transaction: a lookup is one round trip, not three (BEGIN, the
// query, COMMIT), which is most of a settled /verdict's time. Reads of one
// view may therefore see commits made between them; every view tolerates
// that as bbolt's ScanSettled does between its chunks: its pages go on
// after the last key read (keyset), never repeating one, and a record an
// index names but that is gone is skipped. Only the leader writes, so a
// view of the leader's (Load, at a term's start) sees no commit but its
// own.
func (p *pgBackend) view(fn func(txn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	t := &pgTx{ctx: ctx, tx: conn, readOnly: true}
	if err := fn(t); err != nil {
		return err
	}
	return t.err
}

// ErrFenced is returned by a write of a replica that is no longer the
// leader it was when it began writing: it committed nothing.
var ErrFenced = errors.New("not the leader: the lease is another replica's or expired")

func (p *pgBackend) update(fn func(txn) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if l := p.fence.Load(); l == nil && p.leased.Load() {
		return ErrFenced
	} else if l != nil {
		// The row stays locked until the commit: a replica taking the
		// lease over waits for it, and this check fails once it has.
		var ok bool
		err := tx.QueryRow(ctx, `SELECT true FROM fdn_leader
			WHERE name = 'leader' AND holder = $1 AND epoch = $2 AND expires > now() FOR SHARE`, l.Holder, l.Epoch).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrFenced
		}
		if err != nil {
			return err
		}
	}
	t := &pgTx{ctx: ctx, tx: tx}
	if err := fn(t); err != nil {
		return err
	}
	if !t.flush() {
		return t.err
	}
	return tx.Commit(ctx)
}

// commit writes every batch in a transaction: PostgreSQL's own log makes
// it durable.
func (p *pgBackend) commit(_ encoded, _ bool, write func(txn) error) error { return p.update(write) }

// snapshot is a view: PostgreSQL holds no evidence outside its records.
func (p *pgBackend) snapshot(fn func(tx txn, pending map[string][]byte) error) error {
	return p.view(func(tx txn) error { return fn(tx, nil) })
}

func (p *pgBackend) size() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	var n int64
	// The whole database's: the inbox and the views too, and what their
	// rewrites leave until vacuumed (what its volume must hold).
	err := p.pool.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n)
	if err != nil {
		return 0
	}
	return n
}

func (p *pgBackend) close() error {
	p.pool.Close()
	return nil
}

// pgTx queues writes and sends them together before the next read (or the
// commit): one round trip for a batch's records. The puts and deletes of
// keys are gathered per bucket, the last of each key winning, into one
// statement of arrays each: a commit of a thousand records is two
// statements, not a thousand.
type pgTx struct {
	ctx      context.Context
	tx       querier
	readOnly bool // a view's: it writes nothing
	queued   pgx.Batch
	keys     map[string]map[string]keyOp // bucket -> key -> the last write, not queued yet
	buckets  []string                    // of keys, in the order first written
	writes   int                         // writes so far: a cursor's page read before the last is read again
	err      error
}

// querier is a transaction, or a connection for a view's reads.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// keyOp is a key's last write: its value, or deleted.
type keyOp struct {
	value   []byte
	deleted bool
}

// write records a key's write.
func (t *pgTx) write(bucket string, k []byte, op keyOp) {
	if t.readOnly {
		t.fail(errors.New("a write in a view"))
		return
	}
	if t.keys == nil {
		t.keys = map[string]map[string]keyOp{}
	}
	m := t.keys[bucket]
	if m == nil {
		m = map[string]keyOp{}
		t.keys[bucket] = m
		t.buckets = append(t.buckets, bucket)
	}
	m[string(k)] = op
	t.writes++
}

// seal queues the gathered key writes, before a statement that must
// follow them.
func (t *pgTx) seal() {
	for _, bucket := range t.buckets {
		var putKeys, putValues, deleted [][]byte
		for k, op := range t.keys[bucket] {
			if op.deleted {
				deleted = append(deleted, []byte(k))
			} else {
				putKeys, putValues = append(putKeys, []byte(k)), append(putValues, op.value)
			}
		}
		if len(deleted) > 0 {
			t.queued.Queue(`DELETE FROM fdn_kv WHERE bucket = $1 AND key = ANY($2::bytea[])`, bucket, deleted)
		}
		if len(putKeys) > 0 {
			t.queued.Queue(`INSERT INTO fdn_kv (bucket, key, value) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
				ON CONFLICT (bucket, key) DO UPDATE SET value = excluded.value`, bucket, putKeys, putValues)
		}
	}
	t.keys, t.buckets = nil, nil
}

// queue queues a statement after the writes before it.
func (t *pgTx) queue(sql string, args ...any) {
	if t.readOnly {
		t.fail(errors.New("a write in a view"))
		return
	}
	t.seal()
	t.queued.Queue(sql, args...)
}

func (t *pgTx) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// flush sends the queued writes; false when the transaction has failed.
func (t *pgTx) flush() bool {
	if t.err != nil {
		return false
	}
	t.seal()
	if t.queued.Len() == 0 {
		return true
	}
	err := t.tx.SendBatch(t.ctx, &t.queued).Close()
	t.queued = pgx.Batch{}
	if err != nil {
		t.fail(err)
		return false
	}
	return true
}

func (t *pgTx) Bucket(name []byte) bucket { return &pgBucket{t: t, name: string(name)} }

// ensure makes nothing: a bucket is its rows of fdn_kv.
func (t *pgTx) ensure([]byte) error { return nil }

type pgBucket struct {
	t    *pgTx
	name string
}

func (b *pgBucket) Get(k []byte) []byte {
	if !b.t.flush() {
		return nil
	}
	var v []byte
	err := b.t.tx.QueryRow(b.t.ctx, `SELECT value FROM fdn_kv WHERE bucket = $1 AND key = $2`, b.name, k).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		b.t.fail(err)
		return nil
	}
	if v == nil {
		v = []byte{} // present, empty: not absent
	}
	return v
}

func (b *pgBucket) GetMany(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	if len(keys) == 0 || !b.t.flush() {
		return out
	}
	rows, err := b.t.tx.Query(b.t.ctx, `SELECT key, value FROM fdn_kv WHERE bucket = $1 AND key = ANY($2)`, b.name, keys)
	if err != nil {
		b.t.fail(err)
		return out
	}
	found := make(map[string][]byte, len(keys))
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			b.t.fail(err)
			return out
		}
		if v == nil {
			v = []byte{}
		}
		found[string(k)] = v
	}
	if err := rows.Err(); err != nil {
		b.t.fail(err)
		return out
	}
	for i, k := range keys {
		out[i] = found[string(k)]
	}
	return out
}

func (b *pgBucket) Put(k, v []byte) error {
	if b.t.err != nil {
		return b.t.err
	}
	if v == nil {
		v = []byte{} // NULL is not a value
	}
	b.t.write(b.name, k, keyOp{value: v})
	return b.t.err
}

func (b *pgBucket) Delete(k []byte) error {
	if b.t.err != nil {
		return b.t.err
	}
	b.t.write(b.name, k, keyOp{deleted: true})
	return b.t.err
}

func (b *pgBucket) DeletePrefix(prefix []byte) error {
	if b.t.err != nil {
		return b.t.err
	}
	if end := prefixEnd(prefix); end != nil {
		b.t.queue(`DELETE FROM fdn_kv WHERE bucket = $1 AND key >= $2 AND key < $3`, b.name, prefix, end)
	} else {
		b.t.queue(`DELETE FROM fdn_kv WHERE bucket = $1 AND key >= $2`, b.name, prefix)
	}
	b.t.writes++
	return nil
}

// prefixEnd is the least key greater than every key that begins with
// prefix; nil when there is none (prefix is all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (b *pgBucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.t.err
}

func (b *pgBucket) NextSequence() (uint64, error) {
	if !b.t.flush() {
		return 0, b.t.err
	}
	var n int64
	err := b.t.tx.QueryRow(b.t.ctx, `INSERT INTO fdn_sequence (bucket, value) VALUES ($1, 1)
		ON CONFLICT (bucket) DO UPDATE SET value = fdn_sequence.value + 1 RETURNING value`, b.name).Scan(&n)
	if err != nil {
		b.t.fail(err)
		return 0, err
	}
	return uint64(n), nil
}

func (b *pgBucket) Sequence() uint64 {
	if !b.t.flush() {
		return 0
	}
	var n int64
	err := b.t.tx.QueryRow(b.t.ctx, `SELECT value FROM fdn_sequence WHERE bucket = $1`, b.name).Scan(&n)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		b.t.fail(err)
	}
	return uint64(n)
}

func (b *pgBucket) SetSequence(n uint64) error {
	if b.t.err != nil {
		return b.t.err
	}
	b.t.queue(`INSERT INTO fdn_sequence (bucket, value) VALUES ($1, $2)
		ON CONFLICT (bucket) DO UPDATE SET value = excluded.value`, b.name, int64(n))
	b.t.writes++
	return nil
}

func (b *pgBucket) Cursor() cursor { return &pgCursor{b: b} }

// A cursor reads firstPage records after a seek, then pages four times
// larger each, up to cursorPage: most seeks read a key or two (a lookup
// by hash), and a settled record is kilobytes, so a full first page would
// carry hundreds of them for one; a scan soon reads in full pages.
const (
	firstPage  = 4
	cursorPage = 256
)

// pgCursor walks a bucket a page at a time. A write in the transaction
// since the page was read makes the next step read again from where the
// cursor is, so that it sees the bucket as bbolt's cursor would.
type pgCursor struct {
	b      *pgBucket
	keys   [][]byte
	values [][]byte
	i      int
	desc   bool
	full   bool // the page was full: there may be more beyond it
	writes int  // the transaction's writes when the page was read
	page   int  // the size of the page read last
}

func (c *pgCursor) current() (k, v []byte) {
	if c.i < 0 || c.i >= len(c.keys) {
		return nil, nil
	}
	return c.keys[c.i], c.values[c.i]
}

// read reads the page after (or, desc, before) from; from nil: the first
// (last) page, inclusive: from itself too.
func (c *pgCursor) read(from []byte, inclusive, desc bool) (k, v []byte) {
	c.keys, c.values, c.i, c.desc, c.full = c.keys[:0], c.values[:0], 0, desc, false
	c.page = min(max(c.page*4, firstPage), cursorPage)
	t := c.b.t
	if !t.flush() {
		return nil, nil
	}
	c.writes = t.writes
	op, order := ">", "ASC"
	if desc {
		op, order = "<", "DESC"
	}
	if inclusive {
		op += "="
	}
	q := `SELECT key, value FROM fdn_kv WHERE bucket = $1`
	args := []any{c.b.name}
	if from != nil {
		q += ` AND key ` + op + ` $2`
		args = append(args, from)
	}
	q += ` ORDER BY key ` + order + ` LIMIT ` + strconv.Itoa(c.page)
	rows, err := t.tx.Query(t.ctx, q, args...)
	if err != nil {
		t.fail(err)
		return nil, nil
	}
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			t.fail(err)
			return nil, nil
		}
		if v == nil {
			v = []byte{}
		}
		c.keys, c.values = append(c.keys, k), append(c.values, v)
	}
	if err := rows.Err(); err != nil {
		t.fail(err)
		return nil, nil
	}
	c.full = len(c.keys) == c.page
	return c.current()
}

func (c *pgCursor) First() (k, v []byte)           { c.page = 0; return c.read(nil, false, false) }
func (c *pgCursor) Last() (k, v []byte)            { c.page = 0; return c.read(nil, false, true) }
func (c *pgCursor) Seek(seek []byte) (k, v []byte) { c.page = 0; return c.read(seek, true, false) }

func (c *pgCursor) Next() (k, v []byte) { return c.step(false) }
func (c *pgCursor) Prev() (k, v []byte) { return c.step(true) }

func (c *pgCursor) step(desc bool) (k, v []byte) {
	at, _ := c.current()
	if at == nil {
		return nil, nil
	}
	if desc == c.desc && c.writes == c.b.t.writes {
		if c.i+1 < len(c.keys) {
			c.i++
			return c.current()
		}
		if !c.full {
			c.i = len(c.keys)
			return nil, nil
		}
	}
	return c.read(at, false, desc)
}

func (c *pgCursor) Delete() error {
	k, _ := c.current()
	if k == nil {
		return errors.New("delete: the cursor is at no key")
	}
	return c.b.Delete(k)
}

// Lease is one term of leadership: the replica holding it and the term's
// epoch, which only grows.
type Lease struct {
	Holder string
	Epoch  int64
}

// Coordination is what several replicas on one PostgreSQL database share
// beyond the records (replicas.go): the leader's lease and the fence of
// every write, notifications, the inbox, the live views and the login
// form's counter. bbolt has none of it: one process is every part there.
// It writes through the same connections, and its fence guards the
// records' writes too.
type Coordination struct {
	p *pgBackend
	d *DB // the records' codec, and retention's transaction (views)
}

// Campaign takes the lease for holder for ttl on the database's clock when
// it is free (never taken, expired, or given up), or renews it when holder
// has it; ok reports whether holder holds it now. Taking it over begins a
// new epoch.
func (c *Coordination) Campaign(ctx context.Context, holder string, ttl time.Duration) (l Lease, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	l.Holder = holder
	// The term is marked, in the same statement, as one whose leader keeps
	// the inbox for its readers (Log): a leader of a release before this
	// one, which takes its term without the mark, may not.
	err = c.p.pool.QueryRow(ctx, `WITH l AS (INSERT INTO fdn_leader AS l (name, holder, epoch, expires)
			VALUES ('leader', $1, 1, now() + $2 * interval '1 millisecond')
			ON CONFLICT (name) DO UPDATE SET
				holder = excluded.holder,
				epoch = CASE WHEN l.holder = excluded.holder AND l.expires > now() THEN l.epoch ELSE l.epoch + 1 END,
				expires = excluded.expires
			WHERE l.expires <= now() OR l.holder = excluded.holder
			RETURNING epoch),
		k AS (INSERT INTO fdn_trimmed (name, xid, id) SELECT 'keeper', '0', epoch FROM l
			ON CONFLICT (name) DO UPDATE SET id = excluded.id)
		SELECT epoch FROM l`, holder, ttl.Milliseconds()).Scan(&l.Epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, err
	}
	return l, true, nil
}

// Renew extends l for ttl; false when l is no longer held (expired and
// taken over, or given up).
func (c *Coordination) Renew(ctx context.Context, l Lease, ttl time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	tag, err := c.p.pool.Exec(ctx, `UPDATE fdn_leader SET expires = now() + $3 * interval '1 millisecond'
		WHERE name = 'leader' AND holder = $1 AND epoch = $2 AND expires > now()`, l.Holder, l.Epoch, ttl.Milliseconds())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Resign gives l up, so that another replica takes over at once. The row
// stays: its epoch must keep growing.
func (c *Coordination) Resign(ctx context.Context, l Lease) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `UPDATE fdn_leader SET expires = now()
		WHERE name = 'leader' AND holder = $1 AND epoch = $2`, l.Holder, l.Epoch)
	return err
}

// Leader returns the lease as the database has it; ok false when nobody
// ever took it.
func (c *Coordination) Leader(ctx context.Context) (l Lease, expires time.Time, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	err = c.p.pool.QueryRow(ctx, `SELECT holder, epoch, expires FROM fdn_leader WHERE name = 'leader'`).Scan(&l.Holder, &l.Epoch, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, time.Time{}, false, nil
	}
	return l, expires, err == nil, err
}

// Fence makes every later write check, in its own transaction, that l is
// still held: a write of a replica that lost it commits nothing
// (ErrFenced). Nil stops checking.
func (c *Coordination) Fence(l *Lease) { c.p.fence.Store(l) }

// RequireLease makes every later write need a lease given to Fence: a
// replica writes only while it leads.
func (c *Coordination) RequireLease() { c.p.leased.Store(true) }

// Listener waits for notifications on its channels, on a connection of its
// own (a pooled one would be recycled under it). A goroutine reads every
// notification as it comes, whether or not anyone waits: a listening
// backend whose client stops reading blocks sending to it, holding the
// snapshot it reads the notification queue with, and while it holds it
// no vacuum removes a dead row anywhere in the database (a leader too
// busy to wait for its inbox's notifications grew the database by 1.5
// GiB in a day of the fleet benchmark).
type Listener struct {
	conn     *pgx.Conn
	notified chan struct{} // one wake-up for any number of notifications
	done     chan struct{} // closed when the connection fails or closes
	err      error         // why, once done is closed
	stop     context.CancelFunc
}

// Listen opens a connection listening on channels.
func (c *Coordination) Listen(ctx context.Context, channels ...string) (*Listener, error) {
	cctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, c.p.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	for _, ch := range channels {
		if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l := &Listener{conn: conn, notified: make(chan struct{}, 1), done: make(chan struct{}), stop: stop}
	go l.read(rctx)
	return l, nil
}

func (l *Listener) read(ctx context.Context) {
	defer close(l.done)
	for {
		if _, err := l.conn.WaitForNotification(ctx); err != nil {
			l.err = err
			return
		}
		select {
		case l.notified <- struct{}{}:
		default:
		}
	}
}

// Wait returns when a notification came since the last Wait (true), after
// d (false), or with the connection's failure; a notification is a
// wake-up, never the data: the caller reads what changed, also after a
// timeout.
func (l *Listener) Wait(ctx context.Context, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.notified:
		return true, nil
	case <-l.done:
		return false, l.err
	case <-ctx.Done():
		return false, nil
	case <-t.C:
		return false, nil
	}
}

// Close closes the listener's connection.
func (l *Listener) Close() {
	l.stop()
	<-l.done
	l.conn.Close(context.Background())
}

// Registered clusters are shared out among the replicas (issue 53): each
// is read by the one replica that holds its lease, a row of fdn_leader
// named after it, whose epoch fences what its reader appends (Append).
// Each replica says it is alive by a row of its own there too: the
// replicas sharing the clusters are those whose rows have not expired.
// Neither is read by the leader's queries, which name their row.

// ClusterLease is a replica's term reading a registered cluster.
type ClusterLease struct {
	Cluster string
	Lease
}

// ErrClusterFenced is returned by an append under a lease on a cluster
// that is no longer held: it appended nothing.
var ErrClusterFenced = errors.New("not this cluster's reader: its lease is another replica's or expired")

func clusterLeaseName(cluster string) string { return "cluster/" + cluster }
func memberName(replica string) string       { return "replica/" + replica }

// Shares is what the replicas sharing the clusters see of one another: the
// replicas alive, and each cluster's lease.
type Shares struct {
	Replicas []string                // alive (their rows unexpired), sorted
	Leases   map[string]ClusterShare // by cluster; an expired lease too
}

// ClusterShare is a cluster's lease as the database has it.
type ClusterShare struct {
	Lease
	Live bool // unexpired
}

// Share renews replica's own row for ttl, and returns the replicas alive
// and every cluster's lease, in one round trip.
func (c *Coordination) Share(ctx context.Context, replica string, ttl time.Duration) (Shares, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	// Rows of replicas gone for an hour are deleted: a Deployment's pods
	// are named anew at every start. So are the leases nobody held for an
	// hour, those of clusters no longer registered (a registered one's is
	// renewed every few seconds): the rows are bounded by the clusters
	// registered, not by those ever registered. A lease taken again
	// begins at epoch 1, safe because the holder is part of the fence and
	// unique to a process (replica.Identity), whose reader under the old
	// lease stopped an hour before.
	rows, err := c.p.pool.Query(ctx, `WITH m AS (INSERT INTO fdn_leader AS l (name, holder, epoch, expires)
			VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
			ON CONFLICT (name) DO UPDATE SET expires = excluded.expires, holder = excluded.holder),
		gone AS (DELETE FROM fdn_leader WHERE (name LIKE 'replica/%' OR name LIKE 'cluster/%') AND name <> $1
			AND expires < now() - interval '1 hour')
		SELECT name, holder, epoch, expires > now() FROM fdn_leader
		WHERE (name LIKE 'cluster/%' OR name LIKE 'replica/%') AND name <> $1
		UNION ALL SELECT $1, $2, 1, true`, memberName(replica), replica, ttl.Milliseconds())
	if err != nil {
		return Shares{}, err
	}
	defer rows.Close()
	sh := Shares{Leases: map[string]ClusterShare{}}
	for rows.Next() {
		var (
			name string
			cs   ClusterShare
		)
		if err := rows.Scan(&name, &cs.Holder, &cs.Epoch, &cs.Live); err != nil {
			return Shares{}, err
		}
		if cluster, ok := strings.CutPrefix(name, "cluster/"); ok {
			sh.Leases[cluster] = cs
		} else if cs.Live {
			sh.Replicas = append(sh.Replicas, cs.Holder)
		}
	}
	if err := rows.Err(); err != nil {
		return Shares{}, err
	}
	slices.Sort(sh.Replicas)
	return sh, nil
}

// Unshare ends replica's row at once: it stops, and the others share the
// clusters without it.
func (c *Coordination) Unshare(ctx context.Context, replica string) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `UPDATE fdn_leader SET expires = now() WHERE name = $1`, memberName(replica))
	return err
}

// TakeCluster takes cluster's lease for holder for ttl when it is free
// (never taken, expired or given up), a new epoch; ok false when another
// replica holds it.
func (c *Coordination) TakeCluster(ctx context.Context, cluster, holder string, ttl time.Duration) (l ClusterLease, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	l.Cluster, l.Holder = cluster, holder
	err = c.p.pool.QueryRow(ctx, `INSERT INTO fdn_leader AS l (name, holder, epoch, expires)
			VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = l.epoch + 1, expires = excluded.expires
			WHERE l.expires <= now()
			RETURNING epoch`, clusterLeaseName(cluster), holder, ttl.Milliseconds()).Scan(&l.Epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return ClusterLease{}, false, nil
	}
	if err != nil {
		return ClusterLease{}, false, err
	}
	return l, true, nil
}

// RenewClusters extends for ttl those of ls still held, in one statement,
// and returns them; the others were lost.
func (c *Coordination) RenewClusters(ctx context.Context, ls []ClusterLease, ttl time.Duration) ([]ClusterLease, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	names, holders, epochs := make([]string, len(ls)), make([]string, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		names[i], holders[i], epochs[i] = clusterLeaseName(l.Cluster), l.Holder, l.Epoch
	}
	rows, err := c.p.pool.Query(ctx, `UPDATE fdn_leader l SET expires = now() + $4 * interval '1 millisecond'
		FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u (name, holder, epoch)
		WHERE l.name = u.name AND l.holder = u.holder AND l.epoch = u.epoch AND l.expires > now()
		RETURNING l.name`, names, holders, epochs, ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	kept := make(map[string]bool, len(renewed))
	for _, name := range renewed {
		kept[name] = true
	}
	var out []ClusterLease
	for _, l := range ls {
		if kept[clusterLeaseName(l.Cluster)] {
			out = append(out, l)
		}
	}
	return out, nil
}

// ReleaseCluster gives l up, so that another replica takes the cluster at
// once. The row stays: its epoch must keep growing.
func (c *Coordination) ReleaseCluster(ctx context.Context, l ClusterLease) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.timeout)
	defer cancel()
	_, err := c.p.pool.Exec(ctx, `UPDATE fdn_leader SET expires = now() WHERE name = $1 AND holder = $2 AND epoch = $3`,
		clusterLeaseName(l.Cluster), l.Holder, l.Epoch)
	return err
}
