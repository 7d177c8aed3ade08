package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var walT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func evKey(i int) rollout.EvidenceKey {
	return rollout.EvidenceKey{
		Key: rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab"}, Seq: 1,
		Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "layer-" + strconv.Itoa(i)},
	}
}

func evidenceOf(rev string) *rollout.Evidence {
	return &rollout.Evidence{Revision: rev, First: walT0, Last: walT0}
}

func put(t *testing.T, d *DB, puts map[int]string, deletes ...int) error {
	t.Helper()
	b := &rollout.Batch{Puts: map[rollout.EvidenceKey]*rollout.Evidence{}, At: walT0}
	for i, rev := range puts {
		b.Puts[evKey(i)] = evidenceOf(rev)
	}
	for _, i := range deletes {
		b.Deletes = append(b.Deletes, evKey(i))
	}
	return d.Commit(b)
}

// loaded is every evidence record Load gives, by layer name: revision.
func loaded(t *testing.T, d *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := d.Load(func(ek rollout.EvidenceKey, ev *rollout.Evidence) error {
		out[ek.Emitter.Name] = ev.Revision
		return nil
	}, func(string) {}, func(rollout.FloorKey, rollout.Floor) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inBolt counts the evidence records in bbolt itself.
func inBolt(t *testing.T, d *DB) int {
	t.Helper()
	n := 0
	if err := d.bolt().View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketEvidence).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// crashCopy copies the data dir's files as a crash would leave them: the
// process is gone, what it wrote and synced stays.
func crashCopy(t *testing.T, from string, files ...string) string {
	t.Helper()
	to := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

func openT(t *testing.T, dir string) *DB {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func equal(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("loaded %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("loaded %v, want %v", got, want)
		}
	}
}

// TestLogReplaysAfterCrash: evidence acknowledged through the log, and
// only there, is back after a crash; a torn frame at the end (a write the
// crash cut, never acknowledged) is dropped.
func TestLogReplaysAfterCrash(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	for _, b := range []struct {
		puts    map[int]string
		deletes []int
	}{
		{map[int]string{1: "a", 2: "a", 3: "a"}, nil},
		{map[int]string{2: "b"}, nil},
		{map[int]string{4: "a"}, []int{3}},
	} {
		if err := put(t, d, b.puts, b.deletes...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"layer-1": "a", "layer-2": "b", "layer-4": "a"}
	equal(t, loaded(t, d), want)
	if n := inBolt(t, d); n != 0 {
		t.Fatalf("%d evidence records in bbolt: the commits did not go to the log", n)
	}

	crashed := crashCopy(t, dir, FileName, WALName)
	f, err := os.OpenFile(filepath.Join(crashed, WALName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := encodeFrame(d.log().gen, map[string][]byte{string(encodeKey(evKey(9))): []byte(`{"revision":"torn"}`)}, nil)
	if _, err := f.Write(torn[:len(torn)-3]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := openT(t, crashed)
	equal(t, loaded(t, r), want)
	if n := inBolt(t, r); n != len(want) {
		t.Fatalf("%d evidence records in bbolt after the replay, want %d", n, len(want))
	}
	if len(r.log().pending) != 0 || r.log().size != 0 {
		t.Fatalf("after the replay: %d records pending, next frame at %d; want none, 0", len(r.log().pending), r.log().size)
	}
}

// TestLogOfAnOldGenerationIsSkipped: a checkpoint wrote the log's evidence
// to bbolt, then deleted some, and the crash came before the emptied log
// reached the disk (or was only partly overwritten). Replaying the old
// frames would bring the deleted evidence back.
func TestLogOfAnOldGenerationIsSkipped(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := put(t, d, map[int]string{1: "a", 2: "a"}); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(filepath.Join(dir, WALName))
	if err != nil || len(old) == 0 {
		t.Fatalf("log: %d bytes, %v", len(old), err)
	}
	// Settling deletes evidence in a checkpoint.
	b := &rollout.Batch{Deletes: []rollout.EvidenceKey{evKey(1)}, Settle: []*rollout.View{{Cluster: "prod", Hash: "abababababababababababababababababababab", Verdict: rollout.VerdictApplied}}, At: walT0}
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, WALName), old, 0o600); err != nil {
		t.Fatal(err)
	}
	equal(t, loaded(t, openT(t, dir)), map[string]string{"layer-2": "a"})
}

// TestFailedLogWriteCheckpoints: once a write to the log failed, what the
// log held is in doubt, so the next commit writes everything pending to
// bbolt; evidence acknowledged through the log survives even if the log
// file is then lost.
func TestFailedLogWriteCheckpoints(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	if err := put(t, d, map[int]string{1: "a"}); err != nil {
		t.Fatal(err)
	}
	d.log().f.Close() // every write to the log fails from now on
	if err := put(t, d, map[int]string{2: "a"}); err == nil {
		t.Fatal("a commit whose log write failed succeeded")
	}
	if err := put(t, d, map[int]string{3: "a"}); err != nil {
		t.Fatalf("the commit after a failed log write: %v", err)
	}
	want := map[string]string{"layer-1": "a", "layer-3": "a"}
	equal(t, loaded(t, d), want)
	equal(t, loaded(t, openT(t, crashCopy(t, dir, FileName))), want)
}

// TestCheckpointThreshold: the log is written to bbolt once it holds
// enough, so that its memory and replay stay bounded.
func TestCheckpointThreshold(t *testing.T) {
	d := openT(t, t.TempDir())
	for i := range checkpointKeys + 1 {
		if err := put(t, d, map[int]string{i: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(d.log().pending); n >= checkpointKeys {
		t.Fatalf("%d records pending in the log, the threshold is %d", n, checkpointKeys)
	}
	if n := inBolt(t, d); n < checkpointKeys {
		t.Fatalf("%d records in bbolt after %d commits, want at least %d", n, checkpointKeys+1, checkpointKeys)
	}
	if got := loaded(t, d); len(got) != checkpointKeys+1 {
		t.Fatalf("loaded %d records, want %d", len(got), checkpointKeys+1)
	}
}

// rolling makes the evidence of revisions rolling across width layers: each
// batch adds n records of the newest rollouts and, once live rollouts'
// records are there, deletes as many of the oldest (as settling does).
type rolling struct {
	width, live  int
	next, oldest int
}

func (r *rolling) key(i int) rollout.EvidenceKey {
	seq := uint64(i / r.width)
	return rollout.EvidenceKey{Key: rollout.Key{Cluster: "prod", Hash: fmt.Sprintf("%040x", seq)}, Seq: seq,
		Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: fmt.Sprintf("tenant-%04d", i%r.width)}}
}

func (r *rolling) batch(n int) *rollout.Batch {
	b := &rollout.Batch{Puts: map[rollout.EvidenceKey]*rollout.Evidence{}}
	for range n {
		k := r.key(r.next)
		t := at.Add(time.Duration(k.Seq) * time.Minute)
		b.Puts[k] = &rollout.Evidence{Revision: "main@sha1:" + k.Hash, First: t, Last: t.Add(3 * time.Second),
			Progress:      &rollout.Mark{At: t.Add(2 * time.Second), Signal: rollout.SignalProgressing, Reason: "Progressing", Message: "Health check passed in 2.04s"},
			Succeeded:     &rollout.Mark{At: t.Add(3 * time.Second), Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished in 2.31s, next run in 10m0s"},
			LastSucceeded: t.Add(3 * time.Second), Detail: &rollout.Detail{HealthPassed: t.Add(2 * time.Second)}}
		r.next++
		if r.next-r.oldest > r.live*r.width {
			b.Deletes = append(b.Deletes, r.key(r.oldest))
			r.oldest++
		}
	}
	return b
}

// TestCheckpointPacksPages: records of new rollouts go to the right edge of
// the evidence tree, where bbolt's default split leaves every page half
// full and a checkpoint writes twice the pages it needs.
func TestCheckpointPacksPages(t *testing.T) {
	d := openT(t, t.TempDir())
	r := &rolling{width: 1000, live: 4}
	for r.next < 3*checkpointKeys {
		if err := d.Commit(r.batch(128)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(d.log().pending); n >= checkpointKeys {
		t.Fatalf("%d records pending: no checkpoint", n)
	}
	var st bolt.BucketStats
	if err := d.bolt().View(func(tx *bolt.Tx) error {
		st = tx.Bucket(bucketEvidence).Stats()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.8 {
		t.Errorf("evidence pages %.0f%% full (%d in use of %d bytes on %d pages), want at least 80%%",
			100*fill, st.LeafInuse, st.LeafAlloc, st.LeafPageN)
	}
}
