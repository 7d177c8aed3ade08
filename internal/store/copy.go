package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Copy copies every record of src into dst, which must hold no rollout,
// mail or forge record yet: the buckets key by key and their sequences, so
// that dst is the same state (live and settled rollouts, the outbox with
// the keys of every mail enqueued, dead letters, the mail log, the forge's
// outbox and heads). It returns how many records each bucket had.
func Copy(dst, src *DB) (map[string]int, error) {
	if err := empty(dst); err != nil {
		return nil, err
	}
	if err := dst.keep(src.kept); err != nil {
		return nil, fmt.Errorf("keep the channels' outboxes: %w", err)
	}
	counts := map[string]int{}
	for _, name := range src.allBuckets() {
		var (
			chunk [][2][]byte
			seq   uint64
		)
		flush := func() error {
			if len(chunk) == 0 {
				return nil
			}
			err := dst.kv.update(func(tx txn) error {
				b := tx.Bucket(name)
				for _, kv := range chunk {
					if err := b.Put(kv[0], kv[1]); err != nil {
						return err
					}
				}
				return nil
			})
			chunk = chunk[:0]
			return err
		}
		err := src.kv.view(func(tx txn) error {
			b := tx.Bucket(name)
			seq = b.Sequence()
			return b.ForEach(func(k, v []byte) error {
				if !portable(name, k) {
					return nil
				}
				chunk = append(chunk, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
				counts[string(name)]++
				if len(chunk) == copyChunk {
					return flush()
				}
				return nil
			})
		})
		if err == nil {
			err = flush()
		}
		if err == nil && seq > 0 {
			err = dst.kv.update(func(tx txn) error { return tx.Bucket(name).SetSequence(seq) })
		}
		if err != nil {
			return counts, fmt.Errorf("copy %s: %w", name, err)
		}
	}
	return counts, nil
}

// portable reports whether a record is the state's, not one backend's
// own (bbolt's write-ahead log generation), which Copy leaves and Compare
// skips.
func portable(bucket, k []byte) bool {
	return string(bucket) != string(bucketMeta) || string(k) != string(keyWALGen)
}

// copyChunk is how many records one transaction of Copy writes.
const copyChunk = 1000

// empty checks that d holds nothing Copy would overwrite.
func empty(d *DB) error {
	return d.kv.view(func(tx txn) error {
		for _, name := range d.allBuckets() {
			if string(name) == string(bucketMeta) {
				continue // the schema, which every store writes when opened
			}
			if k, _ := tx.Bucket(name).Cursor().First(); k != nil {
				return fmt.Errorf("the destination already holds records (%s): copy into an empty database", name)
			}
		}
		return nil
	})
}

// Compare reports the first difference between the records of a and b:
// nil when every bucket holds the same keys and values and the same
// sequence. It reads both a page at a time.
func Compare(a, b *DB) error {
	if !slices.Equal(a.kept, b.kept) {
		return fmt.Errorf("the channels kept: %v against %v", a.kept, b.kept)
	}
	for _, name := range a.allBuckets() {
		var after []byte
		for {
			ka, va, sa, err := page(a, name, after)
			if err != nil {
				return err
			}
			kb, vb, sb, err := page(b, name, after)
			if err != nil {
				return err
			}
			if sa != sb {
				return fmt.Errorf("%s: sequence %d against %d", name, sa, sb)
			}
			for i := range min(len(ka), len(kb)) {
				if !bytes.Equal(ka[i], kb[i]) || !bytes.Equal(va[i], vb[i]) {
					return fmt.Errorf("%s: record %q differs", name, min(string(ka[i]), string(kb[i])))
				}
			}
			if len(ka) != len(kb) {
				return fmt.Errorf("%s: a record is in one and not the other, after %q", name, after)
			}
			if len(ka) < copyChunk {
				break
			}
			after = ka[len(ka)-1]
		}
	}
	return nil
}

// page reads up to copyChunk records of bucket name after the key after
// (from the first when nil), and the bucket's sequence.
func page(d *DB, name, after []byte) (keys, values [][]byte, seq uint64, err error) {
	err = d.kv.view(func(tx txn) error {
		b := tx.Bucket(name)
		seq = b.Sequence()
		c := b.Cursor()
		k, v := c.First()
		if after != nil {
			if k, v = c.Seek(after); bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(keys) < copyChunk; k, v = c.Next() {
			if !portable(name, k) {
				continue
			}
			keys, values = append(keys, bytes.Clone(k)), append(values, bytes.Clone(v))
		}
		return nil
	})
	return keys, values, seq, err
}

// ErrLeaderRunning is returned by LeaderRunning's callers: replicas hold
// the lease, so the database is in use.
var ErrLeaderRunning = errors.New("a replica leads on this database: stop every replica first")

// LeaderRunning reports whether a replica holds the lease now.
func (c *Coordination) LeaderRunning(ctx context.Context) (bool, error) {
	_, expires, ok, err := c.Leader(ctx)
	if err != nil || !ok {
		return false, err
	}
	return expires.After(time.Now()), nil
}
