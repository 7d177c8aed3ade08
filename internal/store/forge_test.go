package store

import (
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

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
	// Version 1: the fields of version 3 without the four strings of
	// Shown (version 2) and what version 3 added, 13 bytes when zero.
	v1 := func(k rollout.Key, v rollout.Verdict) []byte {
		enc := encodePublication(outbox.Publication{Key: k, Verdict: v, Seq: 1, Changed: at, Since: at})
		enc = enc[:len(enc)-4-13]
		enc[0] = 1
		return enc
	}
	err = d.bolt().Update(func(tx *bolt.Tx) error {
		for _, p := range []struct {
			k rollout.Key
			v rollout.Verdict
		}{{settled.Key(), settled.Verdict}, {live, rollout.VerdictApplying}, {gone, rollout.VerdictFailed}} {
			if err := tx.Bucket(bucketsOf(forgeChannel).records).Put(publicationKey(p.k), v1(p.k, p.v)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketsOf(forgeChannel).due).Put(publicationKey(p.k), nil); err != nil {
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
	_ = d.bolt().View(func(tx *bolt.Tx) error {
		if s := string(tx.Bucket(bucketMeta).Get(keySchema)); s != schema {
			t.Errorf("schema %q after the upgrade, want %q", s, schema)
		}
		return nil
	})
	if p, _, _ := d.Channel("forge").Publication(settled.Key()); p.Shown != rollout.ShownOf(settled) || !p.Due() || p.Seq != 1 {
		t.Fatalf("settled rollout's verdict: %+v, want its final view's, still due", p)
	}
	if p, _, _ := d.Channel("forge").Publication(live); p.Shown != (rollout.Shown{}) {
		t.Fatalf("live rollout's verdict filled before its reload: %+v", p)
	}
	shown := rollout.Shown{Revision: "main@sha1:" + live.Hash, Summary: "1 of 2 layers applied"}
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: live, Verdict: rollout.VerdictApplying, At: at.Add(time.Hour), Shown: shown}}, At: at}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := d.Channel("forge").Publication(live); p.Shown != shown || p.Seq != 1 || !p.Changed.Equal(at) || !p.Due() {
		t.Fatalf("live rollout's verdict after its reload: %+v, want filled, the same verdict", p)
	}
	if p, _, _ := d.Channel("forge").Publication(gone); p.Shown != (rollout.Shown{}) || !p.Due() {
		t.Fatalf("a rollout in neither: %+v, want without, due", p)
	}
}

// TestProgressThroughTheLog: on bbolt a batch whose publications are
// progress alone is evidence alone: it goes to the write-ahead log, not a
// bbolt transaction (the suite's ProgressInMemory has the rest).
func TestProgressThroughTheLog(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetChannels(outbox.Channel{Name: "slack", Progress: true}); err != nil {
		t.Fatal(err)
	}
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ab", 20)}
	b := sampleBatch()
	b.Settle, b.Floors, b.Forget, b.Mails = nil, nil, nil, nil
	b.Published = []rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, At: at, Progress: true, Shown: rollout.Shown{Done: 1, Expected: 3}}}
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	if len(d.log().pending) == 0 || len(d.progress) != 1 {
		t.Fatalf("a batch of progress: %d records in the log, %d progress kept; want it through the log", len(d.log().pending), len(d.progress))
	}
}
