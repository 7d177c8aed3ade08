package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The store's own records: what goes into bbolt is defined here, not by the
// engine's in-memory types, so that the schema version follows these.

// settledRecord is a rollout that can no longer change: everything /verdict,
// /rollouts and the status pages need, nothing the engine would fold again.
// It is stored deflated: the layers of a rollout repeat the same names,
// reasons and messages, which JSON spells out each time.
type settledRecord struct {
	View         *rollout.View `json:"view"`
	OriginHash   string        `json:"origin_hash,omitempty"`
	SupersedeKey *rollout.Key  `json:"supersede_key,omitempty"`
}

func encodeSettled(v *rollout.View) ([]byte, error) {
	raw, err := json.Marshal(settledRecord{View: v, OriginHash: v.OriginHash, SupersedeKey: v.SupersedeKey})
	if err != nil {
		return nil, fmt.Errorf("encode settled rollout: %w", err)
	}
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed) // only fails for a bad level
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeSettled(b []byte) (*rollout.View, error) {
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(b)))
	if err != nil {
		return nil, fmt.Errorf("inflate settled rollout: %w", err)
	}
	var rec settledRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("decode settled rollout: %w", err)
	}
	if rec.View == nil {
		return nil, fmt.Errorf("decode settled rollout: no view")
	}
	rec.View.OriginHash, rec.View.SupersedeKey = rec.OriginHash, rec.SupersedeKey
	return rec.View, nil
}

// Settled keys are hash, NUL, cluster: a hash prefix is one cursor seek.
func settledKey(k rollout.Key) []byte {
	return append(append([]byte(k.Hash), 0), k.Cluster...)
}

func parseSettledKey(b []byte) (rollout.Key, error) {
	hash, cluster, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return rollout.Key{}, fmt.Errorf("malformed settled key %q", b)
	}
	return rollout.Key{Cluster: string(cluster), Hash: string(hash)}, nil
}

// Origin index keys are origin hash, NUL, settled key.
func originKey(origin string, k rollout.Key) []byte {
	return append(append([]byte(origin), 0), settledKey(k)...)
}

// Time index keys are the first evidence as big-endian Unix nanoseconds,
// then the settled key, so a backward cursor lists newest first. The value
// is the last evidence, which retention goes by.
func timeKey(v *rollout.View) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(v.FirstSeen.UnixNano())), settledKey(rollout.Key{Cluster: v.Cluster, Hash: v.Hash})...)
}

func timeValue(v *rollout.View) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v.LastSeen.UnixNano()))
}

func parseTimeKey(b []byte) (first time.Time, k rollout.Key, err error) {
	if len(b) < 9 {
		return time.Time{}, rollout.Key{}, fmt.Errorf("malformed time key %q", b)
	}
	k, err = parseSettledKey(b[8:])
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC(), k, err
}

// Floor keys are cluster, kind, namespace and name joined by NUL; the value
// is the entry's first evidence (big-endian Unix nanoseconds) and hash.
func floorKey(f rollout.FloorKey) []byte {
	return bytes.Join([][]byte{[]byte(f.Cluster), []byte(f.Emitter.Kind), []byte(f.Emitter.Namespace), []byte(f.Emitter.Name)}, []byte{0})
}

func parseFloorKey(b []byte) (rollout.FloorKey, error) {
	p := bytes.Split(b, []byte{0})
	if len(p) != 4 {
		return rollout.FloorKey{}, fmt.Errorf("malformed floor key %q", b)
	}
	return rollout.FloorKey{Cluster: string(p[0]), Emitter: rollout.Emitter{Kind: string(p[1]), Namespace: string(p[2]), Name: string(p[3])}}, nil
}

func floorValue(f rollout.Floor) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(f.First.UnixNano())), f.Hash...)
}

func parseFloorValue(b []byte) (rollout.Floor, error) {
	if len(b) < 8 {
		return rollout.Floor{}, fmt.Errorf("malformed floor %q", b)
	}
	return rollout.Floor{First: time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC(), Hash: string(b[8:])}, nil
}

// Evidence keys are the rollout's sequence number (16 hex digits, so byte
// order is numeric order), cluster, hash, kind, namespace and name, joined
// by NUL, which no Kubernetes name or validated cluster name contains.
// Leading with the sequence keeps the records of recent rollouts, where
// nearly every write goes, on a few adjacent pages: a commit rewrites those
// pages, not pages scattered over the whole file.
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

// Sequence keys are big-endian, so byte order is numeric order.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
