// Package store keeps the rollout evidence in bbolt. Every Commit is one
// fsynced transaction, so what the engine acknowledged survives a crash.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var (
	bucketMeta     = []byte("meta")
	bucketEvidence = []byte("evidence")
	bucketOutbox   = []byte("outbox")   // sequence -> queued mail
	bucketMailKeys = []byte("mailkeys") // de-duplication key of every mail enqueued
	bucketDead     = []byte("dead")     // sequence -> mail that failed for good
	keySchema      = []byte("schema")
	keyLastEvent   = []byte("last-flux-event") // RFC 3339 nanoseconds
)

// schema is bumped when the layout changes incompatibly; an old binary then
// refuses a newer file instead of misreading it.
const schema = "1"

// FileName is the database file inside the data directory.
const FileName = "state.db"

// DB is the bbolt-backed rollout store.
type DB struct {
	db *bolt.DB
}

var _ rollout.Store = (*DB)(nil)

// Open opens (creating if needed) the database in dir. It fails fast when
// another process holds the file.
func Open(dir string) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 2 * time.Second,
		// The freelist is rebuilt on open instead of written on every
		// commit: cheaper commits for a file that stays small.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Map 256 MiB of address space up front: while the file grows
		// within it, commits do not remap it (which blocks every reader
		// and the writer) each time it doubles.
		InitialMmapSize: 1 << 28,
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: another process holds it", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch v := meta.Get(keySchema); {
		case v == nil:
			if err := meta.Put(keySchema, []byte(schema)); err != nil {
				return err
			}
		case string(v) != schema:
			return fmt.Errorf("schema %q, this binary reads %q", v, schema)
		}
		for _, b := range [][]byte{bucketEvidence, bucketOutbox, bucketMailKeys, bucketDead} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// LastEvent is the time of the last event from notification-controller
// recorded by SetLastEvent; zero when none was.
func (d *DB) LastEvent() (time.Time, error) {
	var at time.Time
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyLastEvent)
		if v == nil {
			return nil
		}
		var err error
		at, err = time.Parse(time.RFC3339Nano, string(v))
		return err
	})
	return at, err
}

// SetLastEvent records the time of the last event from
// notification-controller.
func (d *DB) SetLastEvent(at time.Time) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyLastEvent, []byte(at.UTC().Format(time.RFC3339Nano)))
	})
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Load calls evidence for every evidence record and mailed for the key of
// every mail ever enqueued.
func (d *DB) Load(evidence func(rollout.EvidenceKey, *rollout.Evidence) error, mailed func(string)) error {
	return d.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketEvidence).ForEach(func(k, v []byte) error {
			ek, err := decodeKey(k)
			if err != nil {
				return err
			}
			ev := new(rollout.Evidence)
			if err := json.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("decode evidence %q: %w", k, err)
			}
			return evidence(ek, ev)
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

// Commit writes one batch in one transaction: evidence, deletions, and the
// mails the batch made due (the transactional outbox). A mail whose key was
// ever enqueued before is dropped, so it goes out at most once.
func (d *DB) Commit(b *rollout.Batch) error {
	// Encode outside the write lock: bbolt serialises writers.
	type kv struct{ k, v []byte }
	enc := make([]kv, 0, len(b.Puts))
	for ek, ev := range b.Puts {
		v, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode evidence: %w", err)
		}
		enc = append(enc, kv{encodeKey(ek), v})
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		evb := tx.Bucket(bucketEvidence)
		for _, e := range enc {
			if err := evb.Put(e.k, e.v); err != nil {
				return err
			}
		}
		for _, ek := range b.Deletes {
			if err := evb.Delete(encodeKey(ek)); err != nil {
				return err
			}
		}
		if err := forgetMails(tx, b.Forget); err != nil {
			return err
		}
		return enqueue(tx, b.Mails, b.At)
	})
}

func enqueue(tx *bolt.Tx, mails []rollout.Mail, at time.Time) error {
	keys, out := tx.Bucket(bucketMailKeys), tx.Bucket(bucketOutbox)
	for _, m := range mails {
		if keys.Get([]byte(m.Key)) != nil {
			continue
		}
		seq, err := out.NextSequence()
		if err != nil {
			return err
		}
		v, err := json.Marshal(rollout.Queued{Mail: m, Enqueued: at, NextAttempt: at})
		if err != nil {
			return fmt.Errorf("encode mail: %w", err)
		}
		if err := out.Put(seqKey(seq), v); err != nil {
			return err
		}
		if err := keys.Put([]byte(m.Key), seqKey(seq)); err != nil {
			return err
		}
	}
	return nil
}

// forgetMails drops the sent-mail log of collected rollouts.
func forgetMails(tx *bolt.Tx, gone []rollout.Key) error {
	c := tx.Bucket(bucketMailKeys).Cursor()
	for _, k := range gone {
		prefix := []byte(rollout.MailKeyPrefix(k))
		for key, _ := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, _ = c.Seek(prefix) {
			if err := c.Delete(); err != nil {
				return err
			}
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
func (d *DB) Pending() ([]rollout.Queued, error) {
	return d.list(bucketOutbox)
}

// Dead returns every dead-lettered mail.
func (d *DB) Dead() ([]rollout.Queued, error) {
	return d.list(bucketDead)
}

func (d *DB) list(bucket []byte) ([]rollout.Queued, error) {
	var out []rollout.Queued
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var q rollout.Queued
			if err := json.Unmarshal(v, &q); err != nil {
				return fmt.Errorf("decode mail %x: %w", k, err)
			}
			q.Seq = binary.BigEndian.Uint64(k)
			out = append(out, q)
			return nil
		})
	})
	return out, err
}

// Sent removes a delivered mail from the outbox; its key stays, so it is
// never enqueued again.
func (d *DB) Sent(seq uint64) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOutbox).Delete(seqKey(seq))
	})
}

// Reschedule stores a mail's new delivery state after a transient failure.
func (d *DB) Reschedule(q rollout.Queued) error {
	return d.put(bucketOutbox, q, false)
}

// DeadLetter moves a mail that failed for good out of the outbox.
func (d *DB) DeadLetter(q rollout.Queued) error {
	return d.put(bucketDead, q, true)
}

func (d *DB) put(bucket []byte, q rollout.Queued, remove bool) error {
	v, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("encode mail: %w", err)
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		if remove {
			if err := tx.Bucket(bucketOutbox).Delete(seqKey(q.Seq)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucket).Put(seqKey(q.Seq), v)
	})
}

// Sequence keys are big-endian, so byte order is numeric order.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Keys are the rollout's sequence number (16 hex digits, so byte order is
// numeric order), cluster, hash, kind, namespace and name, joined by NUL,
// which no Kubernetes name or validated cluster name contains. Leading with
// the sequence keeps the records of recent rollouts, where nearly every
// write goes, on a few adjacent pages: a commit rewrites those pages, not
// pages scattered over the whole file.
func encodeKey(ek rollout.EvidenceKey) []byte {
	return bytes.Join([][]byte{
		fmt.Appendf(nil, "%016x", ek.Seq), []byte(ek.Cluster), []byte(ek.Hash),
		[]byte(ek.Emitter.Kind), []byte(ek.Emitter.Namespace), []byte(ek.Emitter.Name),
	}, []byte{0})
}

func decodeKey(k []byte) (rollout.EvidenceKey, error) {
	p := bytes.Split(k, []byte{0})
	if len(p) != 6 {
		return rollout.EvidenceKey{}, fmt.Errorf("malformed evidence key %q", k)
	}
	seq, err := strconv.ParseUint(string(p[0]), 16, 64)
	if err != nil {
		return rollout.EvidenceKey{}, fmt.Errorf("malformed evidence key %q: %w", k, err)
	}
	return rollout.EvidenceKey{
		Key:     rollout.Key{Cluster: string(p[1]), Hash: string(p[2])},
		Seq:     seq,
		Emitter: rollout.Emitter{Kind: string(p[3]), Namespace: string(p[4]), Name: string(p[5])},
	}, nil
}
