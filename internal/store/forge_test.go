package store

import (
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestForgeOutbox: a verdict is due until the forge takes it or refuses it
// for good; a later one is due again and replaces one not taken; the
// dispatcher's scan reads the due ones alone (their index), and retention
// drops what was delivered, never what is due.
func TestForgeOutbox(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	key := func(h string) rollout.Key { return rollout.Key{Cluster: "prod", Hash: h} }
	publish := func(h string, v rollout.Verdict, at time.Time) {
		t.Helper()
		if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: key(h), Verdict: v, At: at}}, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	due := func() (hashes []string, indexed int) {
		t.Helper()
		ps, err := d.Publications()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			hashes = append(hashes, p.Key.Hash)
		}
		_ = d.db.View(func(tx *bolt.Tx) error { indexed = tx.Bucket(bucketForgeDue).Stats().KeyN; return nil })
		return hashes, indexed
	}
	for i, h := range []string{"a", "b", "c"} {
		publish(h, rollout.VerdictApplying, at.Add(time.Duration(i)*time.Minute))
	}
	publish("a", rollout.VerdictApplying, at.Add(time.Hour)) // the same again: nothing new
	if p, _, _ := d.Publication(key("a")); p.Seq != 1 || !p.Changed.Equal(at) {
		t.Fatalf("a repeated verdict changed the record: %+v", p)
	}
	if err := d.UpdatePublication(key("a"), func(p *rollout.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	if err := d.UpdatePublication(key("b"), func(p *rollout.Publication) { p.Dead = true }); err != nil {
		t.Fatal(err)
	}
	if got, n := due(); !slices.Equal(got, []string{"c"}) || n != 1 {
		t.Fatalf("due %v (%d indexed), want c alone", got, n)
	}
	// The same verdict restated (what it says changed): due again.
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: key("a"), Verdict: rollout.VerdictApplying, At: at.Add(time.Hour), Restate: true}}, At: at}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := d.Publication(key("a")); p.Seq != 2 || !p.Due() {
		t.Fatalf("a restated verdict is not due again: %+v", p)
	}
	if err := d.UpdatePublication(key("a"), func(p *rollout.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	publish("b", rollout.VerdictFailed, at.Add(2*time.Hour))  // a later verdict: due again
	publish("c", rollout.VerdictApplied, at.Add(3*time.Hour)) // replaces one not taken
	if got, n := due(); !slices.Equal(got, []string{"b", "c"}) || n != 2 {
		t.Fatalf("due %v (%d indexed), want b and c", got, n)
	}
	if p, _, _ := d.Publication(key("c")); p.Seq != 2 || p.Verdict != rollout.VerdictApplied || !p.Since.Equal(at.Add(2*time.Minute)) {
		t.Fatalf("c: %+v, want applied, its second verdict, waiting since the first", p)
	}
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(24 * time.Hour), At: at.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.Publication(key("a")); ok {
		t.Fatal("retention kept a delivered verdict")
	}
	if got, _ := due(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("retention dropped what is due: %v", got)
	}
}
