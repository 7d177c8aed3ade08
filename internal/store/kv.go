package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The store's records live in named buckets of keys ordered byte-wise, as
// bbolt keeps them. Its logic (the outbox, the archive and its indexes,
// retention, the forge's records) is written once over the transactions
// below; bbolt implements them natively, PostgreSQL with one table keyed
// by (bucket, key) (postgres.go). Every backend therefore keeps the same
// records, which is what lets one suite test both and `migrate` copy one
// into the other key by key.

// backend runs transactions. A write transaction is all or nothing, and
// the writes of one process are serialized, as bbolt's are.
type backend interface {
	view(fn func(txn) error) error
	update(fn func(txn) error) error
	// commit makes a batch durable: write in a transaction, or, when the
	// batch is evidence alone (e's puts and deletes, nothing else to
	// write), however the backend makes evidence durable at less cost
	// (bbolt's write-ahead log); written then when it chooses.
	commit(e encoded, evidenceOnly bool, write func(txn) error) error
	// snapshot runs fn in a read transaction with the evidence records
	// the backend holds outside it (encoded key -> record, nil: deleted;
	// none on PostgreSQL), no commit in between: what Load reads.
	snapshot(fn func(tx txn, pending map[string][]byte) error) error
	// size is what the state takes: the files' size, or the database's.
	size() int64
	close() error
}

type txn interface {
	Bucket(name []byte) bucket
	// ensure makes the bucket name where the backend needs a bucket made
	// before it is used (bbolt); the store's own are made when it opens,
	// a channel's when it is kept (channels.go).
	ensure(name []byte) error
}

// bucket is bbolt's bucket, as much of it as the store uses. Get and the
// cursor report no error: a backend whose reads can fail (a network) keeps
// the first failure and fails the transaction with it.
type bucket interface {
	Get(k []byte) []byte
	// GetMany is Get of each key (nil for those absent), in one round
	// trip where that costs one.
	GetMany(keys [][]byte) [][]byte
	Put(k, v []byte) error
	Delete(k []byte) error
	// DeletePrefix deletes every key that begins with prefix.
	DeletePrefix(prefix []byte) error
	ForEach(fn func(k, v []byte) error) error
	NextSequence() (uint64, error)
	Sequence() uint64
	SetSequence(n uint64) error
	Cursor() cursor
}

type cursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	Seek(seek []byte) (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
	Delete() error
}

// buckets are the store's own buckets; the channels' outboxes are named
// after the channels (channels.go).
var buckets = [][]byte{bucketMeta, bucketEvidence, bucketOutbox, bucketMailKeys, bucketDead, bucketSettled, bucketOrigin, bucketTime, bucketFloors, bucketMailLog, bucketForgeHeads}

// allBuckets are the store's own buckets and those of the channels it
// keeps.
func (d *DB) allBuckets() [][]byte {
	out := slices.Clone(buckets)
	for _, name := range d.kept {
		bk := bucketsOf(name)
		out = append(out, bk.records, bk.due)
	}
	return out
}

// boltBackend is bbolt's file and, beside it, its write-ahead log
// (wal.go): a batch of evidence alone goes to the log, anything else to a
// bbolt transaction that takes what the log holds with it.
type boltBackend struct {
	db   *bolt.DB
	path string
	mu   sync.Mutex // guards wal: held by commit, snapshot and close
	wal  *wal
}

func (b *boltBackend) view(fn func(txn) error) error {
	// Begun by hand, not through View, whose wrapper around fn would be
	// one more allocation on every read.
	t, err := b.db.Begin(false)
	if err != nil {
		return err
	}
	defer t.Rollback()
	return fn(boltTx{t})
}

func (b *boltBackend) update(fn func(txn) error) error {
	return b.db.Update(func(t *bolt.Tx) error { return fn(boltTx{t}) })
}

func (b *boltBackend) commit(e encoded, evidenceOnly bool, write func(txn) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if evidenceOnly && !b.wal.needsCheckpoint() {
		if len(e.puts) == 0 && len(e.deletes) == 0 {
			return nil
		}
		return b.wal.append(e.puts, e.deletes)
	}
	err := b.update(func(tx txn) error {
		if err := b.wal.checkpoint(tx); err != nil {
			return err
		}
		return write(tx)
	})
	if err != nil {
		// Until bbolt takes a commit again, the log takes none either:
		// evidence it took meanwhile would end the failure's episode at
		// every event, between commits of mails or settled rollouts that
		// fail again, and the state would look half written.
		b.wal.doubt = true
		return err
	}
	b.wal.checkpointed()
	return nil
}

func (b *boltBackend) snapshot(fn func(tx txn, pending map[string][]byte) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.view(func(tx txn) error { return fn(tx, b.wal.pending) })
}

// size is the database file's and the log's: what the volume must hold.
func (b *boltBackend) size() int64 {
	var n int64
	for _, p := range []string{b.path, filepath.Join(filepath.Dir(b.path), WALName)} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// close writes the evidence pending in the log to the file, so that a
// clean stop leaves an empty log, and closes both.
func (b *boltBackend) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	if len(b.wal.pending) > 0 {
		if err = b.update(b.wal.checkpoint); err == nil {
			b.wal.checkpointed()
		}
	}
	return errors.Join(err, b.wal.close(), b.db.Close())
}

type boltTx struct{ *bolt.Tx }

func (t boltTx) Bucket(name []byte) bucket {
	b := t.Tx.Bucket(name)
	if t.Writable() && string(name) == string(bucketEvidence) {
		// Evidence keys begin with the rollout's sequence number, so a
		// checkpoint's records go to the right edge of the tree, where
		// half-full pages stay half full: splitting pages when 90% full
		// instead of half halves the pages a checkpoint writes
		// (BenchmarkCheckpoint, TestCheckpointPacksPages).
		b.FillPercent = 0.9
	}
	return boltBucket{b}
}

func (t boltTx) ensure(name []byte) error {
	_, err := t.CreateBucketIfNotExists(name)
	return err
}

type boltBucket struct{ *bolt.Bucket }

func (b boltBucket) Cursor() cursor { return b.Bucket.Cursor() }

func (b boltBucket) DeletePrefix(prefix []byte) error {
	c := b.Bucket.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func (b boltBucket) GetMany(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = b.Get(k)
	}
	return out
}
