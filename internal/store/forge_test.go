package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
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
	if err := d.UpdatePublication(key("a"), func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	if err := d.UpdatePublication(key("b"), func(p *outbox.Publication) { p.Dead = true }); err != nil {
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
	if err := d.UpdatePublication(key("a"), func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
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

// TestPublicationOfSchema7: a verdict a schema 7 binary left undelivered
// (its record of version 1, without what is shown with it) is shown after
// the upgrade: its settled rollout's final view fills it when the store
// opens, a live rollout's reload publication fills it (the same verdict,
// not a new one), and one in neither stays without (the dispatcher says
// the rollout is gone). The file is schema 8 after.
func TestPublicationOfSchema7(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := sampleBatch() // settles a rollout
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	settled := b.Settle[0]
	live := rollout.Key{Cluster: "prod", Hash: strings.Repeat("12", 20)}
	gone := rollout.Key{Cluster: "prod", Hash: strings.Repeat("34", 20)}
	// Version 1: the fields of version 2 without the four strings of Shown.
	v1 := func(k rollout.Key, v rollout.Verdict) []byte {
		enc := encodePublication(outbox.Publication{Key: k, Verdict: v, Seq: 1, Changed: at, Since: at})
		enc = enc[:len(enc)-4]
		enc[0] = 1
		return enc
	}
	err = d.db.Update(func(tx *bolt.Tx) error {
		for _, p := range []struct {
			k rollout.Key
			v rollout.Verdict
		}{{settled.Key(), settled.Verdict}, {live, rollout.VerdictApplying}, {gone, rollout.VerdictFailed}} {
			if err := tx.Bucket(bucketForge).Put(publicationKey(p.k), v1(p.k, p.v)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketForgeDue).Put(publicationKey(p.k), nil); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("7"))
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()

	if d, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_ = d.db.View(func(tx *bolt.Tx) error {
		if s := string(tx.Bucket(bucketMeta).Get(keySchema)); s != schema {
			t.Errorf("schema %q after the upgrade, want %q", s, schema)
		}
		return nil
	})
	if p, _, _ := d.Publication(settled.Key()); p.Shown != rollout.ShownOf(settled) || !p.Due() || p.Seq != 1 {
		t.Fatalf("settled rollout's verdict: %+v, want its final view's, still due", p)
	}
	if p, _, _ := d.Publication(live); p.Shown != (rollout.Shown{}) {
		t.Fatalf("live rollout's verdict filled before its reload: %+v", p)
	}
	shown := rollout.Shown{Revision: "main@sha1:" + live.Hash, Summary: "1 of 2 layers applied"}
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: live, Verdict: rollout.VerdictApplying, At: at.Add(time.Hour), Shown: shown}}, At: at}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := d.Publication(live); p.Shown != shown || p.Seq != 1 || !p.Changed.Equal(at) || !p.Due() {
		t.Fatalf("live rollout's verdict after its reload: %+v, want filled, the same verdict", p)
	}
	if p, _, _ := d.Publication(gone); p.Shown != (rollout.Shown{}) || !p.Due() {
		t.Fatalf("a rollout in neither: %+v, want without, due", p)
	}
}
