// Package store keeps the rollout evidence in bbolt. Every Commit is one
// fsynced transaction, so what the engine acknowledged survives a crash.
package store

import (
	"bytes"
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
	keySchema      = []byte("schema")
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
		_, err = tx.CreateBucketIfNotExists(bucketEvidence)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Load calls fn for every evidence record.
func (d *DB) Load(fn func(rollout.EvidenceKey, *rollout.Evidence) error) error {
	return d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvidence).ForEach(func(k, v []byte) error {
			ek, err := decodeKey(k)
			if err != nil {
				return err
			}
			ev := new(rollout.Evidence)
			if err := json.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("decode evidence %q: %w", k, err)
			}
			return fn(ek, ev)
		})
	})
}

// Commit writes and deletes evidence in one transaction.
func (d *DB) Commit(puts map[rollout.EvidenceKey]*rollout.Evidence, deletes []rollout.EvidenceKey) error {
	// Encode outside the write lock: bbolt serialises writers.
	type kv struct{ k, v []byte }
	enc := make([]kv, 0, len(puts))
	for ek, ev := range puts {
		v, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode evidence: %w", err)
		}
		enc = append(enc, kv{encodeKey(ek), v})
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvidence)
		for _, e := range enc {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
		for _, ek := range deletes {
			if err := b.Delete(encodeKey(ek)); err != nil {
				return err
			}
		}
		return nil
	})
}

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
