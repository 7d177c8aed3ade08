// Package store keeps the service's records, on bbolt or PostgreSQL (one
// contract, which suite_test.go holds both to): the evidence of the live
// rollouts, the archive of settled ones (and its retention), the mail
// outbox with its sent keys, dead letters and mail log, and the channels'
// outboxes with the commits the forge last showed applied. Every Commit is
// durable when it returns, so what the engine acknowledged survives a
// crash: on bbolt most through its backend's write-ahead log (wal.go), the
// rest as one fsynced transaction. On PostgreSQL, Coordination is what
// several replicas share beyond the records.
package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fsync"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var (
	bucketMeta     = []byte("meta")
	bucketEvidence = []byte("evidence") // live rollouts' evidence
	bucketOutbox   = []byte("outbox")   // sequence -> queued mail
	bucketMailKeys = []byte("mailkeys") // de-duplication key of every mail enqueued for a live rollout
	bucketDead     = []byte("dead")     // sequence -> mail that failed for good
	bucketSettled  = []byte("settled")  // hash NUL cluster -> deflated settledRecord
	bucketOrigin   = []byte("settled-origin")
	bucketTime     = []byte("settled-time")
	bucketFloors   = []byte("floors") // emitter -> newest settled entry of its log
	keySchema      = []byte("schema")
	keyLastEvent   = []byte("last-flux-event") // RFC 3339 nanoseconds
	keySettledN    = []byte("settled-count")   // big-endian uint64
)

// schema is bumped when the records change incompatibly; an old binary then
// refuses a newer file instead of misreading it. 2 added the settled
// rollouts and the floors; 3 the write-ahead log, which a schema 2 binary
// would not replay; 4 settled records of version 2 (each layer's first
// evidence), which a schema 3 binary cannot read, and the mail log; 5
// binary evidence records, which a schema 4 binary would take for broken
// JSON; 6 binary outbox, dead-letter and mail-log records, which a schema
// 5 binary would take for broken JSON, and the emitter's role in evidence
// records and floors, which it would misread; 7 evidence records of version 4 (the
// releases a layer holds), settled records of version 4 and queued mails of
// version 2 and mail-log records of version 2 (releases), which a schema 6
// binary cannot read; 8 forge outbox records of version 2 (what is shown
// with the verdict), which a schema 7 binary refuses. Older files are upgraded in place (their evidence and settled
// records are read as they are, JSON evidence too, rewritten as the
// rollouts change), and the engine settles what it can at its first start.
const schema = "8"

// FileName is the database file inside the data directory.
const FileName = "state.db"

// DB is the rollout store, on bbolt (Open) or PostgreSQL (OpenPostgres):
// the records, which both backends keep the same (kv.go).
type DB struct {
	kv      backend
	records codec

	channels []outbox.Channel // SetChannels'
	kept     []string         // the channels whose outboxes it keeps (channels.go), sorted
	// progress are the latest progress publications of each rollout (how
	// many layers applied it: rollout.Published.Progress), which no
	// commit writes: the outboxes' reads show them, and a delivery's
	// record writes them (ChannelBox), so that a rollout's layers applying
	// one by one cost no transaction each (a fifth of the fleet's ingest,
	// docs/performance.md). A crash or a stop loses them; the reload
	// publishes each live rollout's progress again (rollout.Model's
	// load). pmu guards the map.
	pmu      sync.Mutex
	progress map[rollout.Key]rollout.Published
	// purged removes, in retention's transaction, what else its backend
	// keeps of rollouts (the replicas' views, which Coordination sets).
	purged func(tx txn)
}

// publishTo are the channels the commits publish to.
func (d *DB) publishTo() []outbox.Channel {
	if d.channels == nil {
		// Told of none (SetChannels): the forge's, as before there were
		// other channels.
		return []outbox.Channel{outbox.ForgeChannel()}
	}
	return d.channels
}

// compactAbove and compactFree decide when Open rewrites the file: bbolt
// never shrinks it, so after retention has freed most of a large file the
// space only comes back by copying the live pages to a new one.
const (
	compactAbove = 64 << 20
	compactFree  = 0.5
)

// Open opens (creating if needed) the database in dir. It fails fast when
// another process holds the file. A large file that is mostly free space is
// compacted first.
func Open(dir string) (*DB, error) { return openDB(dir, compactAbove) }

func openDB(dir string, compactAbove int64) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := open(path)
	if err != nil {
		return nil, err
	}
	if mostlyFree(db, compactAbove) {
		db.Close()
		if err := compact(path); err != nil {
			return nil, err
		}
		if db, err = open(path); err != nil {
			return nil, err
		}
	}
	kv := &boltBackend{db: db, path: path}
	d := &DB{kv: kv, purged: func(txn) {}}
	err = d.kv.update(func(tx txn) error {
		for _, b := range buckets {
			if err := tx.ensure(b); err != nil {
				return err
			}
		}
		d.kept, err = initRecords(tx)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	if kv.wal, err = openWAL(kv, filepath.Join(dir, WALName)); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// initRecords checks the records' schema, upgrades an older one, makes
// the outboxes of the channels kept, which it returns, and fills what
// version 1 forge records lack.
func initRecords(tx txn) ([]string, error) {
	meta := tx.Bucket(bucketMeta)
	v := meta.Get(keySchema)
	if v != nil && meta.Get(keyChannels) == nil {
		// Written before the store listed the channels it keeps: the
		// buckets its release made may hold records.
		if err := meta.Put(keyChannels, []byte(strings.Join(channelsBefore, ","))); err != nil {
			return nil, err
		}
	}
	switch {
	case v == nil, string(v) == "1", string(v) == "2", string(v) == "3", string(v) == "4", string(v) == "5", string(v) == "6", string(v) == "7":
		if err := meta.Put(keySchema, []byte(schema)); err != nil {
			return nil, err
		}
	case string(v) != schema:
		return nil, fmt.Errorf("schema %q, this binary reads %q", v, schema)
	}
	kept, err := channelsIn(tx)
	if err != nil {
		return nil, err
	}
	return kept, fillShown(tx, &codec{})
}

func open(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 2 * time.Second,
		// The freelist is rebuilt on open instead of written on every
		// commit: cheaper commits.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Map 256 MiB of address space up front: while the file grows
		// within it, commits do not remap it (which blocks every reader
		// and the writer) each time it doubles.
		InitialMmapSize: 1 << 28,
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: another process holds it", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// mostlyFree reports whether more than compactFree of the pages below the
// file's high-water mark are free. The file itself is larger: bbolt grows
// it in chunks (16 MiB) ahead of use.
func mostlyFree(db *bolt.DB, compactAbove int64) bool {
	fi, err := os.Stat(db.Path())
	if err != nil || fi.Size() < compactAbove {
		return false
	}
	var used int64
	if err := db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil || used == 0 {
		return false
	}
	st := db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
	return float64(free) > compactFree*float64(used)
}

// compact copies the live pages of path to a new file and renames it over
// the old one; a crash midway leaves the old file, and a stale copy is
// overwritten next time.
func compact(path string) error {
	tmp := path + ".compact"
	_ = os.Remove(tmp)
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("compact %s: %w", path, err)
	}
	defer src.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("compact %s: %w", path, err)
	}
	if err := bolt.Compact(dst, src, 16<<20); err != nil {
		dst.Close()
		return fmt.Errorf("compact %s: %w", path, err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return fmt.Errorf("compact %s: %w", path, err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("compact %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("compact %s: %w", path, err)
	}
	return fsync.Dir(filepath.Dir(path))
}

// Size is the size in bytes of the state: bbolt's file and its log, or
// the PostgreSQL database.
func (d *DB) Size() int64 { return d.kv.size() }

// LastEvent is the time of the last event from cluster's
// notification-controller recorded by SetLastEvents; zero when none was.
// Cluster "" is the service's own, under the key it always had.
func (d *DB) LastEvent(cluster string) (time.Time, error) {
	var at time.Time
	err := d.kv.view(func(tx txn) error {
		v := tx.Bucket(bucketMeta).Get(lastEventKey(cluster))
		if v == nil {
			return nil
		}
		var err error
		at, err = time.Parse(time.RFC3339Nano, string(v))
		return err
	})
	return at, err
}

// SetLastEvents records the time of the last event from each cluster's
// notification-controller, by cluster ("" the service's own), in one
// transaction: a hub records its clusters' together.
func (d *DB) SetLastEvents(at map[string]time.Time) error {
	if len(at) == 0 {
		return nil
	}
	return d.kv.update(func(tx txn) error {
		b := tx.Bucket(bucketMeta)
		for cluster, t := range at {
			if err := b.Put(lastEventKey(cluster), []byte(t.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		return nil
	})
}

// PruneLastEvents deletes the last events recorded of the clusters keep
// says are no longer registered (their Secrets removed, while the service
// ran or not), and says how many went: what is kept is bounded by the
// clusters registered, not by those ever registered. The service's own
// stays.
func (d *DB) PruneLastEvents(keep func(cluster string) bool) (int, error) {
	prefix := append(bytes.Clone(keyLastEvent), '/')
	n := 0
	err := d.kv.update(func(tx txn) error {
		b := tx.Bucket(bucketMeta)
		var gone [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if !keep(string(k[len(prefix):])) {
				gone = append(gone, bytes.Clone(k))
			}
		}
		for _, k := range gone {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(gone)
		return nil
	})
	return n, err
}

// lastEventKey is where cluster's last event is kept: the service's own
// ("") under keyLastEvent, as earlier releases read it.
func lastEventKey(cluster string) []byte {
	if cluster == "" {
		return keyLastEvent
	}
	return []byte(string(keyLastEvent) + "/" + cluster)
}

// Close closes the store: bbolt's log is written to its file first, so
// that a clean stop leaves it empty.
func (d *DB) Close() error { return d.kv.close() }

// Load calls evidence for every evidence record (the live rollouts), mailed
// for the key of every mail enqueued for them, and floor for every
// emitter's floor. Settled rollouts are not loaded: they are read when
// asked for.
func (d *DB) Load(evidence func(rollout.EvidenceKey, *rollout.Evidence) error, mailed func(string), floor func(rollout.FloorKey, rollout.Floor) error) error {
	decode := func(k, v []byte) error {
		ek, err := decodeKey(k)
		if err != nil {
			return err
		}
		ev, role, err := decodeEvidence(v)
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		ek.Emitter.Role = role
		return evidence(ek, ev)
	}
	return d.kv.snapshot(func(tx txn, pending map[string][]byte) error {
		evb := tx.Bucket(bucketEvidence)
		err := evb.ForEach(func(k, v []byte) error {
			if p, ok := pending[string(k)]; ok {
				if p == nil {
					return nil // deleted since the checkpoint
				}
				v = p
			}
			return decode(k, v)
		})
		if err != nil {
			return err
		}
		for k, v := range pending {
			if v != nil && evb.Get([]byte(k)) == nil {
				if err := decode([]byte(k), v); err != nil {
					return err
				}
			}
		}
		err = tx.Bucket(bucketFloors).ForEach(func(k, v []byte) error {
			fk, err := parseFloorKey(k)
			if err != nil {
				return err
			}
			f, role, err := parseFloorValue(v)
			if err != nil {
				return err
			}
			fk.Emitter.Role = role
			return floor(fk, f)
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketMailKeys).ForEach(func(k, _ []byte) error {
			mailed(string(k))
			return nil
		})
	})
}

// Commit writes one batch durably: evidence, deletions, settled rollouts
// with their floors, retention, the mails the batch made due (the
// transactional outbox) and the verdicts published to the channels' outboxes.
// A mail whose key was ever enqueued before is dropped, so it goes out at
// most once. A batch of evidence alone goes where its backend makes it
// durable at least cost (bbolt's log); the progress it publishes is kept
// in memory (progress).
func (d *DB) Commit(b *rollout.Batch) error {
	e, err := d.encode(b) // outside the backend's lock
	if err != nil {
		return err
	}
	verdicts, progress := splitProgress(b.Published)
	evidenceOnly := len(b.Forget) == 0 && len(b.Mails) == 0 && len(b.Settle) == 0 && len(b.Floors) == 0 && len(verdicts) == 0 && b.PurgeBefore.IsZero()
	if err := d.kv.commit(e, evidenceOnly, func(tx txn) error { return d.commitTx(tx, b, e, verdicts) }); err != nil {
		return err
	}
	if len(progress) > 0 || len(b.Forget) > 0 || len(verdicts) > 0 {
		d.pmu.Lock()
		for _, p := range verdicts {
			delete(d.progress, p.Key) // what it shows is the latest
		}
		for _, p := range progress {
			if d.progress == nil {
				d.progress = map[rollout.Key]rollout.Published{}
			}
			d.progress[p.Key] = p
		}
		for _, k := range b.Forget {
			delete(d.progress, k)
		}
		d.pmu.Unlock()
	}
	return nil
}

// splitProgress parts publications into verdicts (a change, or one
// restated) and progress (more layers applied).
func splitProgress(ps []rollout.Published) (verdicts, progress []rollout.Published) {
	for _, p := range ps {
		if p.Progress {
			progress = append(progress, p)
		} else {
			verdicts = append(verdicts, p)
		}
	}
	return verdicts, progress
}

// encoded is a batch's records, encoded.
type encoded struct {
	puts    map[string][]byte // evidence key -> record
	deletes []string
	settled [][]byte // of b.Settle
}

func (d *DB) encode(b *rollout.Batch) (encoded, error) {
	e := encoded{puts: make(map[string][]byte, len(b.Puts)), deletes: make([]string, len(b.Deletes)), settled: make([][]byte, len(b.Settle))}
	for ek, ev := range b.Puts {
		e.puts[string(encodeKey(ek))] = encodeEvidence(ek.Emitter.Role, ev)
	}
	for i, ek := range b.Deletes {
		e.deletes[i] = string(encodeKey(ek))
	}
	for i, v := range b.Settle {
		var err error
		if e.settled[i], err = d.records.encodeSettled(v); err != nil {
			return encoded{}, err
		}
	}
	return e, nil
}

// commitTx writes batch b, encoded as e, in tx, with the verdicts it
// publishes.
func (d *DB) commitTx(tx txn, b *rollout.Batch, e encoded, verdicts []rollout.Published) error {
	evb := tx.Bucket(bucketEvidence)
	for k, v := range e.puts {
		if err := evb.Put([]byte(k), v); err != nil {
			return err
		}
	}
	for _, k := range e.deletes {
		if err := evb.Delete([]byte(k)); err != nil {
			return err
		}
	}
	if err := forgetMails(tx, b.Forget); err != nil {
		return err
	}
	// A settled rollout keeps its mail log until retention purges it; a
	// collected one is gone for good.
	if err := dropMailLog(tx, collected(b)); err != nil {
		return err
	}
	if err := settle(tx, b.Settle, e.settled, b.Floors); err != nil {
		return err
	}
	if !b.PurgeBefore.IsZero() {
		if err := purge(tx, &d.records, b.PurgeBefore); err != nil {
			return err
		}
		if err := purgePublications(tx, d.kept, b.PurgeBefore); err != nil {
			return err
		}
	}
	if err := publish(tx, d.publishTo(), verdicts); err != nil {
		return err
	}
	if !b.PurgeBefore.IsZero() {
		d.purged(tx)
	}
	return enqueue(tx, b.Mails, b.At)
}

// collected are the rollouts b forgets without settling them.
func collected(b *rollout.Batch) []rollout.Key {
	if len(b.Forget) == 0 {
		return nil
	}
	settled := make(map[rollout.Key]bool, len(b.Settle))
	for _, v := range b.Settle {
		settled[v.Key()] = true
	}
	var out []rollout.Key
	for _, k := range b.Forget {
		if !settled[k] {
			out = append(out, k)
		}
	}
	return out
}

func settle(tx txn, views []*rollout.View, records [][]byte, floors map[rollout.FloorKey]rollout.Floor) error {
	sb, ob, tb := tx.Bucket(bucketSettled), tx.Bucket(bucketOrigin), tx.Bucket(bucketTime)
	keys := make([][]byte, len(views))
	for i, v := range views {
		keys[i] = settledKey(v.Key())
	}
	added := 0
	for _, old := range sb.GetMany(keys) {
		if old == nil {
			added++
		}
	}
	for i, v := range views {
		k := v.Key()
		if err := sb.Put(keys[i], records[i]); err != nil {
			return err
		}
		if v.OriginHash != "" {
			if err := ob.Put(originKey(v.OriginHash, k), nil); err != nil {
				return err
			}
		}
		if err := tb.Put(timeKey(v), timeValue(v)); err != nil {
			return err
		}
	}
	fb := tx.Bucket(bucketFloors)
	for fk, f := range floors {
		if err := fb.Put(floorKey(fk), floorValue(fk.Emitter.Role, f)); err != nil {
			return err
		}
	}
	return addSettled(tx, added)
}

// purge deletes the settled rollouts whose last evidence is before cutoff.
// The time index is ordered by first evidence, which is never after the
// last: the scan stops at the first rollout that began after the cutoff.
// It goes in chunks, each read first and then deleted, so that a backend
// over a network reads a chunk's records in one round trip.
func purge(tx txn, records *codec, cutoff time.Time) error {
	sb, ob, tb := tx.Bucket(bucketSettled), tx.Bucket(bucketOrigin), tx.Bucket(bucketTime)
	removed := 0
	var from []byte // the first time key the next chunk looks at
	for done := false; !done; {
		c := tb.Cursor()
		k, v := c.First()
		if from != nil {
			k, v = c.Seek(from)
		}
		var expired [][]byte // time keys
		var keys []rollout.Key
		for ; ; k, v = c.Next() {
			if k == nil {
				done = true
				break
			}
			first, key, err := parseTimeKey(k)
			if err != nil {
				return err
			}
			if !first.Before(cutoff) {
				done = true
				break
			}
			if len(expired) == purgeChunk {
				from = bytes.Clone(k)
				break
			}
			if len(v) != 8 || !time.Unix(0, int64(binary.BigEndian.Uint64(v))).Before(cutoff) {
				continue
			}
			expired, keys = append(expired, bytes.Clone(k)), append(keys, key)
		}
		sk := make([][]byte, len(keys))
		for i, key := range keys {
			sk[i] = settledKey(key)
		}
		var gone []rollout.Key
		for i, rec := range sb.GetMany(sk) {
			if rec != nil {
				view, err := records.decodeSettled(rec)
				if err != nil {
					return err
				}
				if view.OriginHash != "" {
					if err := ob.Delete(originKey(view.OriginHash, keys[i])); err != nil {
						return err
					}
				}
				if err := sb.Delete(sk[i]); err != nil {
					return err
				}
				gone = append(gone, keys[i])
			}
			if err := tb.Delete(expired[i]); err != nil {
				return err
			}
		}
		if err := dropMailLog(tx, gone); err != nil {
			return err
		}
		removed += len(gone)
	}
	return addSettled(tx, -removed)
}

// purgeChunk is how many settled rollouts purge reads at once.
const purgeChunk = 256

func addSettled(tx txn, delta int) error {
	if delta == 0 {
		return nil
	}
	meta := tx.Bucket(bucketMeta)
	var n uint64
	if v := meta.Get(keySettledN); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	n = uint64(max(int64(n)+int64(delta), 0))
	return meta.Put(keySettledN, binary.BigEndian.AppendUint64(nil, n))
}

func enqueue(tx txn, mails []rollout.Mail, at time.Time) error {
	keys, out := tx.Bucket(bucketMailKeys), tx.Bucket(bucketOutbox)
	mk := make([][]byte, len(mails))
	for i, m := range mails {
		mk[i] = []byte(m.Key)
	}
	seen := make(map[string]bool, len(mails))
	for i, old := range keys.GetMany(mk) {
		m := mails[i]
		if old != nil || seen[m.Key] {
			continue // enqueued before, or earlier in this batch
		}
		seen[m.Key] = true
		seq, err := out.NextSequence()
		if err != nil {
			return err
		}
		q := outbox.Queued{Seq: seq, Mail: m, Enqueued: at, Delivery: outbox.Delivery{NextAttempt: at}}
		if err := out.Put(seqKey(seq), encodeQueued(q)); err != nil {
			return err
		}
		if err := logMail(tx, q, outbox.MailWaiting, nil); err != nil {
			return err
		}
		if err := keys.Put([]byte(m.Key), seqKey(seq)); err != nil {
			return err
		}
	}
	return nil
}

// forgetMails drops the de-duplication keys of the mails of rollouts no
// longer live.
func forgetMails(tx txn, gone []rollout.Key) error {
	return deleteByRollout(tx.Bucket(bucketMailKeys), gone)
}

// deleteByRollout deletes the keys of b that start with a gone rollout's
// mail key prefix.
func deleteByRollout(b bucket, gone []rollout.Key) error {
	for _, k := range gone {
		if err := b.DeletePrefix([]byte(rollout.MailKeyPrefix(k))); err != nil {
			return err
		}
	}
	return nil
}

// Enqueue writes mails that no state change made due (the watchdog's) to
// the outbox, once per key.
func (d *DB) Enqueue(mails []rollout.Mail, at time.Time) error {
	return d.Commit(&rollout.Batch{Mails: mails, At: at})
}

// Pending returns every mail in the outbox, oldest first.
func (d *DB) Pending() ([]outbox.Queued, error) {
	return d.list(bucketOutbox)
}

// Dead returns every dead-lettered mail.
func (d *DB) Dead() ([]outbox.Queued, error) {
	return d.list(bucketDead)
}

func (d *DB) list(bucket []byte) ([]outbox.Queued, error) {
	var out []outbox.Queued
	err := d.kv.view(func(tx txn) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			q, err := decodeQueued(k, v)
			if err == nil {
				// The dead letters are a bucket of their own.
				q.Dead = string(bucket) == string(bucketDead)
				out = append(out, q)
			}
			return err
		})
	})
	return out, err
}

// Sent removes a mail delivered at at from the outbox; its key stays, so
// it is never enqueued again, and the mail log says when it went.
func (d *DB) Sent(seq uint64, at time.Time) error {
	return d.kv.update(func(tx txn) error {
		q, err := outboxMail(tx, seq)
		if err != nil {
			return err
		}
		if q != nil {
			at := at.UTC()
			if err := logMail(tx, *q, outbox.MailSent, &at); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketOutbox).Delete(seqKey(seq))
	})
}

// Record stores a mail's delivery after a failed attempt: in the outbox
// to be tried again, or, dead, moved out of it to the dead letters.
func (d *DB) Record(q outbox.Queued) error {
	bucket, state := bucketOutbox, outbox.MailRetrying
	if q.Dead {
		bucket, state = bucketDead, outbox.MailDead
	}
	v := encodeQueued(q)
	return d.kv.update(func(tx txn) error {
		if q.Dead {
			if err := tx.Bucket(bucketOutbox).Delete(seqKey(q.Seq)); err != nil {
				return err
			}
		}
		if err := logMail(tx, q, state, nil); err != nil {
			return err
		}
		return tx.Bucket(bucket).Put(seqKey(q.Seq), v)
	})
}

// Settled returns the final view of a settled rollout, or nil.
func (d *DB) Settled(k rollout.Key) (*rollout.View, error) {
	var v *rollout.View
	err := d.kv.view(func(tx txn) error {
		rec := tx.Bucket(bucketSettled).Get(settledKey(k))
		if rec == nil {
			return nil
		}
		var err error
		v, err = d.records.decodeSettled(rec)
		return err
	})
	return v, err
}

// SettledAmong reports which of keys are settled rollouts.
func (d *DB) SettledAmong(keys []rollout.Key) (map[rollout.Key]bool, error) {
	out := map[rollout.Key]bool{}
	err := d.kv.view(func(tx txn) error {
		sk := make([][]byte, len(keys))
		for i, k := range keys {
			sk[i] = settledKey(k)
		}
		for i, rec := range tx.Bucket(bucketSettled).GetMany(sk) {
			if rec != nil {
				out[keys[i]] = true
			}
		}
		return nil
	})
	return out, err
}

// SettledKeys returns up to limit settled rollouts whose hash (or, with
// origin, whose origin revision's hash) is hash or, with prefix, starts
// with it; on one cluster unless cluster is "". A cursor seek: the cost
// does not grow with the history.
func (d *DB) SettledKeys(hash string, prefix, origin bool, cluster string, limit int) ([]rollout.Key, error) {
	var out []rollout.Key
	err := d.kv.view(func(tx txn) error {
		b := tx.Bucket(bucketSettled)
		if origin {
			b = tx.Bucket(bucketOrigin)
		}
		seek := []byte(hash)
		if !prefix {
			seek = append(seek, 0)
		}
		c := b.Cursor()
		for k, _ := c.Seek(seek); k != nil && bytes.HasPrefix(k, seek) && len(out) < limit; k, _ = c.Next() {
			if origin {
				_, k, _ = bytes.Cut(k, []byte{0})
			}
			key, err := parseSettledKey(k)
			if err != nil {
				return err
			}
			if cluster == "" || key.Cluster == cluster {
				out = append(out, key)
			}
		}
		return nil
	})
	return out, err
}

// ScanSettled calls fn with settled rollouts newest first (by first
// evidence), of one cluster or all, starting with those that began at
// until or before (all, when until is zero), until fn returns false.
//
// It reads in short transactions of at most scanChunk records, and
// decodes and calls fn outside them: a read transaction holds bbolt's mmap
// lock, which a commit that grows the file must wait for, and keeps the
// pages it can see from reuse. A rollout settled or collected between two
// of them is seen or not, as if the scan had begun later.
func (d *DB) ScanSettled(cluster string, until time.Time, fn func(*rollout.View) bool) error {
	var from []byte // the time key the next transaction goes on before
	if !until.IsZero() {
		from = binary.BigEndian.AppendUint64(nil, uint64(until.UnixNano()+1))
	}
	for {
		var recs [][]byte
		more := false
		err := d.kv.view(func(tx txn) error {
			sb := tx.Bucket(bucketSettled)
			c := tx.Bucket(bucketTime).Cursor()
			// The greatest key before from (present, or collected since:
			// Seek finds what follows it either way), or the last.
			var k []byte
			if from == nil {
				k, _ = c.Last()
			} else if k, _ = c.Seek(from); k == nil {
				k, _ = c.Last()
			} else {
				k, _ = c.Prev()
			}
			var want [][]byte // settled keys, read together
			var err error
			more, err = timeKeys(k, c.Prev, &from, func() bool { return len(want) == scanChunk }, func(key rollout.Key) {
				if cluster == "" || key.Cluster == cluster {
					want = append(want, settledKey(key))
				}
			})
			if err != nil {
				return err
			}
			for _, rec := range sb.GetMany(want) {
				if rec != nil {
					recs = append(recs, bytes.Clone(rec))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, rec := range recs {
			v, err := d.records.decodeSettled(rec)
			if err != nil {
				return err
			}
			if !fn(v) {
				return nil
			}
		}
		if !more {
			return nil
		}
	}
}

// scanChunk and scanKeys bound one read transaction of ScanSettled: the
// records it copies, and the keys it looks at for a cluster few match.
const (
	scanChunk = 64
	scanKeys  = 4096
)

// SettledClusters returns the clusters settled rollouts are kept of, from
// the time index (each key ends with its rollout's): read once by a
// reader, which learns the clusters of later ones from their live views.
// It reads scanKeys keys a transaction, as ScanSettled does: a read
// transaction as long as the archive would hold bbolt's remapping (its
// growth) back, and PostgreSQL's vacuum.
func (d *DB) SettledClusters() ([]string, error) {
	set := map[string]bool{}
	var from []byte // the last key read: the next transaction goes on after it
	for more := true; more; {
		more = false
		err := d.kv.view(func(tx txn) error {
			c := tx.Bucket(bucketTime).Cursor()
			var k []byte
			if from == nil {
				k, _ = c.First()
			} else if k, _ = c.Seek(from); k != nil && bytes.Equal(k, from) {
				k, _ = c.Next()
			}
			var err error
			more, err = timeKeys(k, c.Next, &from, func() bool { return false }, func(key rollout.Key) { set[key.Cluster] = true })
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// timeKeys reads the time index from k, stepping with step, until its end,
// scanKeys keys or full: it gives each key's rollout to take and leaves the
// last key read in last, where the next transaction goes on. more: it
// stopped before the end.
func timeKeys(k []byte, step func() ([]byte, []byte), last *[]byte, full func() bool, take func(rollout.Key)) (more bool, err error) {
	for n := 0; k != nil; k, _ = step() {
		if n++; n > scanKeys || full() {
			return true, nil
		}
		*last = append((*last)[:0], k...)
		_, key, err := parseTimeKey(k)
		if err != nil {
			return false, err
		}
		take(key)
	}
	return false, nil
}

// SettledCount is how many settled rollouts are kept.
func (d *DB) SettledCount() (int, error) {
	var n int
	err := d.kv.view(func(tx txn) error {
		if v := tx.Bucket(bucketMeta).Get(keySettledN); len(v) == 8 {
			n = int(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return n, err
}
