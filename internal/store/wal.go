package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"syscall"
)

// The write-ahead log. A bbolt commit costs two fsyncs (data pages, then
// the meta page) and a write of every page the transaction touched; most
// commits only add evidence. Those go to an append-only log instead, one
// write and one fdatasync per group commit, and are kept in memory
// (pending) until a checkpoint writes them to bbolt in one transaction.
// A commit carrying anything else (mails, settled rollouts, floors,
// retention) is a checkpoint itself, so the outbox and the archive, which
// other goroutines read, are always in bbolt.
//
// bbolt's meta holds the log's generation. A checkpoint writes the pending
// evidence and the next generation in one transaction; the next frame is
// written at the start of the file again. Frames of an older generation
// are skipped on replay, so a frame is applied at most once and never over
// newer state. Each frame carries a CRC: a torn frame (a crash mid-write,
// never acknowledged), or the middle of an older frame where the current
// ones end, ends the replay.
//
// The file is preallocated (zeros written ahead, doubling as it fills) and
// never truncated: an fdatasync of a write within the file's size flushes
// the data alone, not the inode, which on ext4 takes half the time of an
// appending one.
//
// After a failed write or fdatasync the file's contents are in doubt (on
// Linux a failed fsync may have dropped pages written before it), so the
// next commit is a checkpoint: the pending evidence, still in memory, goes
// to bbolt with its own fsyncs before anything more is acknowledged.

// WALName is the log's file inside the data directory.
const WALName = "evidence.wal"

var keyWALGen = []byte("wal-generation") // big-endian uint64

// Checkpoint thresholds: bound the memory pending evidence takes and the
// replay at start.
const (
	checkpointBytes = 2 << 20
	checkpointKeys  = 2048
	// walInitial is the file's preallocated size at first.
	walInitial = 1 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type wal struct {
	f       *os.File
	gen     uint64
	size    int64             // where the next frame goes
	alloc   int64             // the file's size
	pending map[string][]byte // encoded evidence key -> record, nil: deleted
	bytes   int               // encoded size of pending
	doubt   bool              // a write (or a bbolt commit) failed: checkpoint before writing again
}

// Frame: length (4 bytes), CRC-32C of the payload (4), payload. Payload:
// generation (8), then records: op (1: put, 0: delete), key and value as
// uvarint-prefixed bytes.
const frameHeader = 8

func encodeFrame(gen uint64, puts map[string][]byte, deletes []string) []byte {
	n := frameHeader + 8
	for k, v := range puts {
		n += 1 + 2*binary.MaxVarintLen32 + len(k) + len(v)
	}
	for _, k := range deletes {
		n += 1 + binary.MaxVarintLen32 + len(k)
	}
	b := make([]byte, frameHeader, n)
	b = binary.BigEndian.AppendUint64(b, gen)
	for k, v := range puts {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	for _, k := range deletes {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-frameHeader))
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[frameHeader:], crcTable))
	return b
}

// decodeFrames applies to pending every record of the frames of
// generation gen, up to the first torn or corrupt frame.
func decodeFrames(data []byte, gen uint64, pending map[string][]byte) {
	for len(data) >= frameHeader {
		n := int(binary.BigEndian.Uint32(data[0:4]))
		if n < 8 || len(data)-frameHeader < n {
			return
		}
		payload := data[frameHeader : frameHeader+n]
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(data[4:8]) {
			return
		}
		data = data[frameHeader+n:]
		if binary.BigEndian.Uint64(payload) != gen {
			continue
		}
		if !decodeRecords(payload[8:], pending) {
			return
		}
	}
}

func decodeRecords(p []byte, pending map[string][]byte) bool {
	field := func() ([]byte, bool) {
		n, w := binary.Uvarint(p)
		if w <= 0 || uint64(len(p)-w) < n {
			return nil, false
		}
		f := p[w : w+int(n)]
		p = p[w+int(n):]
		return f, true
	}
	for len(p) > 0 {
		op := p[0]
		p = p[1:]
		k, ok := field()
		if !ok {
			return false
		}
		if op == 0 {
			pending[string(k)] = nil
			continue
		}
		v, ok := field()
		if !ok {
			return false
		}
		pending[string(k)] = v
	}
	return true
}

// openWAL opens the log and replays its current generation into bbolt:
// after it returns the log is empty.
func openWAL(db backend, path string) (*wal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w := &wal{f: f, pending: map[string][]byte{}}
	err = db.view(func(tx txn) error {
		if v := tx.Bucket(bucketMeta).Get(keyWALGen); len(v) == 8 {
			w.gen = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	decodeFrames(data, w.gen, w.pending)
	if err := db.update(w.checkpoint); err != nil {
		f.Close()
		return nil, fmt.Errorf("replay %s: %w", path, err)
	}
	w.checkpointed()
	w.alloc = int64(len(data))
	if err := w.grow(walInitial); err != nil {
		f.Close()
		return nil, fmt.Errorf("preallocate %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("preallocate %s: %w", path, err)
	}
	return w, nil
}

// grow writes zeros to make the file at least n bytes long, doubling it.
func (w *wal) grow(n int64) error {
	if n <= w.alloc {
		return nil
	}
	to := max(n, 2*w.alloc)
	if _, err := w.f.WriteAt(make([]byte, to-w.alloc), w.alloc); err != nil {
		return err
	}
	w.alloc = to
	return nil
}

// needsCheckpoint reports whether the next commit must go to bbolt.
func (w *wal) needsCheckpoint() bool {
	return w.doubt || w.bytes >= checkpointBytes || len(w.pending) >= checkpointKeys
}

// append writes one frame and fdatasyncs it; on success the records are
// pending.
func (w *wal) append(puts map[string][]byte, deletes []string) error {
	if w.f == nil {
		w.doubt = true
		return errors.New("log closed")
	}
	frame := encodeFrame(w.gen, puts, deletes)
	// The fdatasync below makes the zeros durable with the frame.
	if err := w.grow(w.size + int64(len(frame))); err != nil {
		w.doubt = true
		return fmt.Errorf("preallocate log: %w", err)
	}
	if _, err := w.f.WriteAt(frame, w.size); err != nil {
		w.doubt = true
		return fmt.Errorf("write log: %w", err)
	}
	if err := syscall.Fdatasync(int(w.f.Fd())); err != nil {
		w.doubt = true
		return fmt.Errorf("sync log: %w", err)
	}
	w.size += int64(len(frame))
	for k, v := range puts {
		w.bytes += len(k) + len(v)
		w.pending[k] = v
	}
	for _, k := range deletes {
		w.bytes += len(k)
		w.pending[k] = nil
	}
	return nil
}

// checkpoint writes the pending evidence and the next generation in tx.
func (w *wal) checkpoint(tx txn) error {
	evb := tx.Bucket(bucketEvidence)
	for k, v := range w.pending {
		var err error
		if v == nil {
			err = evb.Delete([]byte(k))
		} else {
			err = evb.Put([]byte(k), v)
		}
		if err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keyWALGen, binary.BigEndian.AppendUint64(nil, w.gen+1))
}

// checkpointed follows a committed checkpoint: the pending evidence is in
// bbolt, the frames in the file are of an old generation, and the next one
// is written over them.
func (w *wal) checkpointed() {
	w.gen++
	clear(w.pending)
	w.bytes, w.size, w.doubt = 0, 0, false
}

func (w *wal) close() error {
	if w.f == nil {
		return nil
	}
	f := w.f
	w.f = nil
	return f.Close()
}
