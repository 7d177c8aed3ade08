package store

import (
	"slices"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestChannelsOfSchema8: a data dir of the release before the store
// listed the channels it keeps (schema 8 without keyChannels) still has
// the outboxes that release made, records and all: no migration.
func TestChannelsOfSchema8(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	if err := d.SetChannels(outbox.Channel{Name: "slack", Progress: true}); err != nil {
		t.Fatal(err)
	}
	k := rollout.Key{Cluster: "prod", Hash: "a"}
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, At: at}}, At: at}); err != nil {
		t.Fatal(err)
	}
	// What that release wrote: the same buckets, no list.
	if err := d.kv.update(func(tx txn) error { return tx.Bucket(bucketMeta).Delete(keyChannels) }); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = openT(t, dir)
	if want := []string{"forge", "slack", "teams", "webhook"}; !slices.Equal(d.kept, want) {
		t.Fatalf("kept %v, want %v", d.kept, want)
	}
	if p, ok, err := d.Channel("slack").Publication(k); err != nil || !ok || !p.Due() {
		t.Fatalf("slack's record after the upgrade: %+v %v %v", p, ok, err)
	}
}
