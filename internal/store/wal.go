package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
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
// Generations: bbolt's meta holds the first generation whose frames are
// not in bbolt yet. A checkpoint writes the evidence and the next
// generation in one transaction. Generation g is written to file g%2, from
// its start: frames of an older generation are skipped on replay, so a
// frame is applied at most once and never over newer state. Each frame
// carries a CRC: a torn frame (a crash mid-write, never acknowledged), or
// the middle of an older frame where the current ones end, ends the
// replay of its file.
//
// Once the log holds enough, its generation is checkpointed in the
// background, as etcd applies its log: a checkpoint of 2,048 records takes
// 10 to 30 ms on a 2-core machine, which every request of a group commit
// would otherwise wait for. The next generation is appended to the other
// file meanwhile, and replay applies the older generation before the newer
// one. A checkpoint in the foreground (any commit that is not evidence
// alone) first waits for the one in the background: its evidence is older,
// and committed after, would overwrite newer evidence or bring deleted
// evidence back.
//
// The files are preallocated (zeros written ahead, doubling as they fill)
// and never truncated: an fdatasync of a write within the file's size
// flushes the data alone, not the inode, which on ext4 takes half the time
// of an appending one.
//
// After a failed write or fdatasync the file's contents are in doubt (on
// Linux a failed fsync may have dropped pages written before it), so the
// next commit is a checkpoint: the pending evidence, still in memory, goes
// to bbolt with its own fsyncs before anything more is acknowledged. A
// failed background checkpoint does the same with its evidence.

// walNames are the log's files inside the data directory, for even and odd
// generations.
var walNames = [2]string{"evidence.wal", "evidence-odd.wal"}

var keyWALGen = []byte("wal-generation") // big-endian uint64

// Checkpoint thresholds: bound the memory pending evidence takes and the
// replay at start. While a background checkpoint runs, the log goes on past
// them, up to walHold times, before a commit waits for it.
const (
	checkpointBytes = 2 << 20
	checkpointKeys  = 2048
	walHold         = 4
	// walInitial is each file's preallocated size at first.
	walInitial = 1 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type wal struct {
	files   [2]*os.File
	alloc   [2]int64          // each file's size
	gen     uint64            // the pending evidence's generation, written to files[gen%2]
	size    int64             // where its next frame goes
	pending map[string][]byte // encoded evidence key -> record, nil: deleted
	bytes   int               // encoded size of pending
	flush   *flush            // the generation before, checkpointed in the background; nil when none
	doubt   bool              // a write (or a bbolt commit) failed: checkpoint before writing again

	// fault, when set (by tests), runs before a background checkpoint;
	// an error fails it.
	fault func() error
}

// flush is a generation of evidence being checkpointed in the background.
type flush struct {
	records map[string][]byte // read-only once handed over
	done    chan struct{}     // closed when the checkpoint ended
	err     error             // its result, set before done is closed
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

// openWAL opens the log's files in dir and replays them into bbolt: the
// generation of bbolt's meta, then the next (a background checkpoint that
// a crash cut); after it returns the log is empty. A generation's frames
// are in one file, but both are read for each: a data dir of a release
// with one file has every generation in the first.
func openWAL(db *bolt.DB, dir string) (*wal, error) {
	w := &wal{pending: map[string][]byte{}}
	var data [2][]byte
	for i, name := range walNames {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		w.files[i] = f
		if data[i], err = io.ReadAll(f); err != nil {
			w.close()
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		w.alloc[i] = int64(len(data[i]))
	}
	err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyWALGen); len(v) == 8 {
			w.gen = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		w.close()
		return nil, err
	}
	for _, gen := range []uint64{w.gen, w.gen + 1} {
		for _, d := range data {
			decodeFrames(d, gen, w.pending)
		}
	}
	w.gen++ // the checkpoint below covers both
	if err := db.Update(w.checkpoint); err != nil {
		w.close()
		return nil, fmt.Errorf("replay the log: %w", err)
	}
	w.checkpointed()
	for i, f := range w.files {
		if err := w.grow(i, walInitial); err != nil {
			w.close()
			return nil, fmt.Errorf("preallocate %s: %w", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			w.close()
			return nil, fmt.Errorf("preallocate %s: %w", f.Name(), err)
		}
	}
	return w, nil
}

// grow writes zeros to make file i at least n bytes long, doubling it.
func (w *wal) grow(i int, n int64) error {
	if n <= w.alloc[i] {
		return nil
	}
	to := max(n, 2*w.alloc[i])
	if _, err := w.files[i].WriteAt(make([]byte, to-w.alloc[i]), w.alloc[i]); err != nil {
		return err
	}
	w.alloc[i] = to
	return nil
}

// over reports whether the pending evidence is n times past a threshold.
func (w *wal) over(n int) bool {
	return w.bytes >= n*checkpointBytes || len(w.pending) >= n*checkpointKeys
}

// rotate starts a background checkpoint of the pending evidence once it is
// past a threshold, and the next generation in the other file. While the
// last one still runs, it waits for it only walHold times past; when that
// one failed, the log is in doubt and nothing rotates.
func (w *wal) rotate(db *bolt.DB) {
	if !w.over(1) {
		return
	}
	w.reap(w.over(walHold))
	if w.flush != nil || w.doubt {
		return
	}
	f := &flush{records: w.pending, done: make(chan struct{})}
	gen, fault := w.gen, w.fault
	go func() {
		defer close(f.done)
		if fault != nil {
			if f.err = fault(); f.err != nil {
				return
			}
		}
		f.err = db.Update(func(tx *bolt.Tx) error { return writeEvidence(tx, f.records, gen+1) })
	}()
	w.flush = f
	w.pending = map[string][]byte{}
	w.gen++
	w.bytes, w.size = 0, 0
}

// reap ends the background checkpoint if it is done, waiting for it if
// wait is set. A failed one stays, for the next checkpoint to write.
func (w *wal) reap(wait bool) {
	if w.flush == nil {
		return
	}
	if wait {
		<-w.flush.done
	} else {
		select {
		case <-w.flush.done:
		default:
			return
		}
	}
	if w.flush.err != nil {
		w.doubt = true
		return
	}
	w.flush = nil
}

// get returns the log's record for an encoded evidence key (nil: deleted),
// and whether it holds one.
func (w *wal) get(k string) ([]byte, bool) {
	if v, ok := w.pending[k]; ok {
		return v, true
	}
	if w.flush != nil {
		v, ok := w.flush.records[k]
		return v, ok
	}
	return nil, false
}

// each calls fn with every key the log holds a record for, and the record.
func (w *wal) each(fn func(k string, v []byte) error) error {
	for k, v := range w.pending {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if w.flush == nil {
		return nil
	}
	for k, v := range w.flush.records {
		if _, ok := w.pending[k]; ok {
			continue
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// empty reports whether the log holds nothing bbolt does not.
func (w *wal) empty() bool { return len(w.pending) == 0 && w.flush == nil }

// append writes one frame and fdatasyncs it; on success the records are
// pending.
func (w *wal) append(puts map[string][]byte, deletes []string) error {
	i := int(w.gen % 2)
	f := w.files[i]
	if f == nil {
		w.doubt = true
		return errors.New("log closed")
	}
	frame := encodeFrame(w.gen, puts, deletes)
	// The fdatasync below makes the zeros durable with the frame.
	if err := w.grow(i, w.size+int64(len(frame))); err != nil {
		w.doubt = true
		return fmt.Errorf("preallocate log: %w", err)
	}
	if _, err := f.WriteAt(frame, w.size); err != nil {
		w.doubt = true
		return fmt.Errorf("write log: %w", err)
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
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

// checkpoint writes in tx the evidence of a failed background checkpoint,
// then the pending evidence, and the generation after it. The caller has
// reaped the background checkpoint.
func (w *wal) checkpoint(tx *bolt.Tx) error {
	if w.flush != nil {
		if err := writeEvidence(tx, w.flush.records, w.gen); err != nil {
			return err
		}
	}
	return writeEvidence(tx, w.pending, w.gen+1)
}

// writeEvidence writes records and, as the first generation not in bbolt,
// next.
func writeEvidence(tx *bolt.Tx, records map[string][]byte, next uint64) error {
	evb := tx.Bucket(bucketEvidence)
	for k, v := range records {
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
	return tx.Bucket(bucketMeta).Put(keyWALGen, binary.BigEndian.AppendUint64(nil, next))
}

// checkpointed follows a committed checkpoint: all evidence is in bbolt,
// the frames in both files are of old generations, and the next one is
// written over those of the other file.
func (w *wal) checkpointed() {
	w.gen++
	w.flush = nil
	clear(w.pending)
	w.bytes, w.size, w.doubt = 0, 0, false
}

// close closes the files; the caller has reaped the background checkpoint.
func (w *wal) close() error {
	var errs []error
	for i, f := range w.files {
		if f != nil {
			errs = append(errs, f.Close())
			w.files[i] = nil
		}
	}
	return errors.Join(errs...)
}
