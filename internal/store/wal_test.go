package store

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var walT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func evKey(i int) rollout.EvidenceKey {
	return rollout.EvidenceKey{
		Key: rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab"}, Seq: 1,
		Emitter: rollout.Emitter{Kind: rollout.KindLayer, Namespace: "flux-system", Name: "layer-" + strconv.Itoa(i)},
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
	}, func(string) {}, func(rollout.FloorKey, rollout.Floor) {})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inBolt counts the evidence records in bbolt itself.
func inBolt(t *testing.T, d *DB) int {
	t.Helper()
	n := 0
	if err := d.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketEvidence).Stats().KeyN; return nil }); err != nil {
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

	crashed := crashCopy(t, dir, FileName, walNames[0], walNames[1])
	f, err := os.OpenFile(filepath.Join(crashed, walNames[d.wal.gen%2]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := encodeFrame(d.wal.gen, map[string][]byte{string(encodeKey(evKey(9))): []byte(`{"revision":"torn"}`)}, nil)
	if _, err := f.Write(torn[:len(torn)-3]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := openT(t, crashed)
	equal(t, loaded(t, r), want)
	if n := inBolt(t, r); n != len(want) {
		t.Fatalf("%d evidence records in bbolt after the replay, want %d", n, len(want))
	}
	if len(r.wal.pending) != 0 || r.wal.size != 0 {
		t.Fatalf("after the replay: %d records pending, next frame at %d; want none, 0", len(r.wal.pending), r.wal.size)
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
	old, err := os.ReadFile(filepath.Join(dir, walNames[0]))
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
	if err := os.WriteFile(filepath.Join(dir, walNames[0]), old, 0o600); err != nil {
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
	d.wal.close() // every write to the log fails from now on
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

// fill commits checkpointKeys records in one batch (layers 1000 on, and
// those of puts): the log is then past its threshold, and the next commit
// of evidence starts a background checkpoint.
func fill(t *testing.T, d *DB, puts map[int]string) {
	t.Helper()
	all := map[int]string{}
	for i := range checkpointKeys - len(puts) {
		all[1000+i] = "a"
	}
	maps.Copy(all, puts)
	if err := put(t, d, all); err != nil {
		t.Fatal(err)
	}
	if !d.wal.over(1) || d.wal.flush != nil {
		t.Fatalf("%d records pending, a background checkpoint: %v; want %d, none", len(d.wal.pending), d.wal.flush != nil, checkpointKeys)
	}
}

// waitFlush waits for the background checkpoint to end and reaps it.
func waitFlush(d *DB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wal.reap(true)
}

// TestCheckpointThreshold: the log is written to bbolt once it holds
// enough, so that its memory and replay stay bounded; in the background,
// while the next commits go on to the other file, and seen by Load
// throughout.
func TestCheckpointThreshold(t *testing.T) {
	d := openT(t, t.TempDir())
	fill(t, d, nil)
	if err := put(t, d, map[int]string{1: "a"}); err != nil {
		t.Fatal(err)
	}
	if d.wal.flush == nil || len(d.wal.pending) != 1 || d.wal.gen%2 != 1 {
		t.Fatalf("after the commit past the threshold: background checkpoint %v, %d records pending in generation %d; want one, 1, odd",
			d.wal.flush != nil, len(d.wal.pending), d.wal.gen)
	}
	if got := loaded(t, d); len(got) != checkpointKeys+1 {
		t.Fatalf("loaded %d records during the background checkpoint, want %d", len(got), checkpointKeys+1)
	}
	waitFlush(d)
	if d.wal.flush != nil || d.wal.doubt {
		t.Fatal("the background checkpoint failed")
	}
	if n := inBolt(t, d); n != checkpointKeys {
		t.Fatalf("%d records in bbolt after the background checkpoint, want %d", n, checkpointKeys)
	}
	if got := loaded(t, d); len(got) != checkpointKeys+1 {
		t.Fatalf("loaded %d records, want %d", len(got), checkpointKeys+1)
	}
}

// TestCrashDuringBackgroundCheckpoint: the crash comes while a generation
// is being checkpointed in the background (bbolt as before it), or just
// after it. Either way the replay gives the last acknowledged evidence:
// the older generation first, then the newer one over it, and never the
// older one over newer evidence.
func TestCrashDuringBackgroundCheckpoint(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	fill(t, d, map[int]string{1: "a", 2: "a", 3: "a"})
	before := crashCopy(t, dir, FileName)
	if err := put(t, d, map[int]string{2: "b", 4: "a"}, 3); err != nil {
		t.Fatal(err)
	}
	if err := put(t, d, map[int]string{5: "a"}); err != nil {
		t.Fatal(err)
	}
	want := func(got map[string]string) {
		t.Helper()
		for name, rev := range map[string]string{"layer-1": "a", "layer-2": "b", "layer-3": "", "layer-4": "a", "layer-5": "a"} {
			if got[name] != rev {
				t.Fatalf("%s: %q, want %q", name, got[name], rev)
			}
		}
		if len(got) != checkpointKeys+1 {
			t.Fatalf("loaded %d records, want %d", len(got), checkpointKeys+1)
		}
	}
	cut := crashCopy(t, dir, walNames[0], walNames[1])
	for _, f := range []string{FileName} {
		b, err := os.ReadFile(filepath.Join(before, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cut, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want(loaded(t, openT(t, cut)))
	waitFlush(d)
	want(loaded(t, openT(t, crashCopy(t, dir, FileName, walNames[0], walNames[1]))))
}

// TestCheckpointWaitsForBackground: a checkpoint in the foreground (here
// settling a rollout, which deletes its evidence) waits for the background
// one; committed after it, the older evidence would come back.
func TestCheckpointWaitsForBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		d.wal.fault = func() error { <-release; return nil }
		fill(t, d, map[int]string{1: "a"})
		if err := put(t, d, map[int]string{2: "a"}); err != nil {
			t.Fatal(err)
		}
		settled := make(chan error, 1)
		go func() {
			settled <- d.Commit(&rollout.Batch{
				Deletes: []rollout.EvidenceKey{evKey(1)},
				Settle:  []*rollout.View{{Cluster: "prod", Hash: "abababababababababababababababababababab", Verdict: rollout.VerdictApplied}},
				At:      walT0,
			})
		}()
		synctest.Wait()
		select {
		case err := <-settled:
			t.Fatalf("the checkpoint returned (%v) while the background one had not begun", err)
		default:
		}
		close(release)
		if err := <-settled; err != nil {
			t.Fatal(err)
		}
		got := loaded(t, d)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		for _, got := range []map[string]string{got, loaded(t, again)} {
			if got["layer-1"] != "" || got["layer-2"] != "a" {
				t.Fatalf("layer-1 %q, layer-2 %q; want deleted, a", got["layer-1"], got["layer-2"])
			}
		}
	})
}

// TestFailedBackgroundCheckpoint: when the background checkpoint fails,
// its evidence stays in memory and the next commit writes it to bbolt, as
// after a failed log write; nothing acknowledged is lost, even with the
// log's files gone.
func TestFailedBackgroundCheckpoint(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	d.wal.fault = func() error { return errors.New("disk full") }
	fill(t, d, map[int]string{1: "a"})
	if err := put(t, d, map[int]string{2: "a"}); err != nil {
		t.Fatal(err)
	}
	<-d.wal.flush.done
	if err := put(t, d, map[int]string{3: "a"}); err != nil {
		t.Fatalf("the commit after a failed background checkpoint: %v", err)
	}
	if !d.wal.empty() || d.wal.doubt {
		t.Fatalf("after the commit: log empty %v, in doubt %v; want empty, not", d.wal.empty(), d.wal.doubt)
	}
	got := loaded(t, openT(t, crashCopy(t, dir, FileName)))
	if len(got) != checkpointKeys+2 || got["layer-1"] != "a" || got["layer-3"] != "a" {
		t.Fatalf("bbolt alone holds %d records (layer-1 %q, layer-3 %q), want %d", len(got), got["layer-1"], got["layer-3"], checkpointKeys+2)
	}
}

// TestReplaysLogOfOneFile: a data dir of the release with a single log
// file (schema 4), as a crash left it, its frames of an odd generation in
// the first file (testdata/v4-crashed, made by e08137a): the new release
// replays them.
func TestReplaysLogOfOneFile(t *testing.T) {
	dir := crashCopy(t, filepath.Join("testdata", "v4-crashed"), FileName, walNames[0])
	equal(t, loaded(t, openT(t, dir)), map[string]string{"layer-1": "a", "layer-2": "b", "layer-4": "a"})
}
