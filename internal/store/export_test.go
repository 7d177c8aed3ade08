package store

import bolt "go.etcd.io/bbolt"

// OpenCompactingAbove is Open with a smaller file size above which a mostly
// free file is compacted.
func OpenCompactingAbove(dir string, n int64) (*DB, error) { return openDB(dir, n) }

// Record encodings, for the golden round trip.
var (
	EncodeSettled = encodeSettled
	DecodeSettled = decodeSettled
	EncodeKey     = encodeKey
	DecodeKey     = decodeKey
	SettledView   = settledView
)

// bolt is the bbolt database of a DB opened by Open.
func (d *DB) bolt() *bolt.DB { return d.kv.(*boltBackend).db }

// log is the write-ahead log of a DB opened by Open.
func (d *DB) log() *wal { return d.kv.(*boltBackend).wal }

// file is the bbolt file of a DB opened by Open.
func (d *DB) file() string { return d.kv.(*boltBackend).path }
