package engine_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

func publishConfig() rollout.Config {
	cfg := defaultConfig()
	cfg.Publish = true
	return cfg
}

// forgeRecord is the forge outbox's record of revision label's rollout.
func forgeRecord(t *testing.T, te *enginetest.Engine, label string) outbox.Publication {
	t.Helper()
	p, ok, err := te.DB.Channel("forge").Publication(rollout.Key{Cluster: "default", Hash: hashOf(label)})
	if err != nil || !ok {
		t.Fatalf("no forge outbox record of %s: %v", label, err)
	}
	return p
}

// TestVerdictChangesPublished: each change of a rollout's verdict is in
// the forge outbox once its batch is acknowledged, a later one replacing
// one not delivered; without Publish, nothing is.
func TestVerdictChangesPublished(t *testing.T) {
	te := enginetest.Start(t, t.TempDir(), publishConfig(), fixedClock(t0.Add(time.Minute)), true)
	var woke int
	te.OnPublish(func([]rollout.Published) { woke++ })
	submitAll(t, te, 1, applied0...)
	submitAll(t, te, 1, succ("infra", "R1", 1))
	p := forgeRecord(t, te, "R1")
	if p.Verdict != rollout.VerdictApplying || p.Seq != 1 || !p.Due() || !p.Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after the first layer: %+v, want applying, due", p)
	}
	if woke == 0 {
		t.Fatal("the forge's dispatcher was not woken")
	}
	submitAll(t, te, 2, succ("platform", "R1", 2), succ("apps", "R1", 3)) // and repeated: nothing new
	if p = forgeRecord(t, te, "R1"); p.Verdict != rollout.VerdictApplied || p.Seq != 2 || !p.Due() {
		t.Fatalf("once applied: %+v, want applied, the second verdict", p)
	}
	if ps, err := te.DB.Channel("forge").Publications(); err != nil || len(ps) != 2 { // R0 and R1
		t.Fatalf("due: %+v %v, want R0's and R1's", ps, err)
	}

	off := enginetest.Start(t, t.TempDir(), defaultConfig(), fixedClock(t0.Add(time.Minute)), true)
	submitAll(t, off, 1, applied0...)
	if ps, err := off.DB.Channel("forge").Publications(); err != nil || len(ps) != 0 {
		t.Fatalf("without a forge: %+v %v", ps, err)
	}
}

// TestStuckPublishedWhenDownAtTheDeadline: a deadline that passed while the
// service was down changes the verdict at the reload, which no batch
// decides: the reload publishes it, and a second one nothing more.
func TestStuckPublishedWhenDownAtTheDeadline(t *testing.T) {
	dir := t.TempDir()
	te := enginetest.Start(t, dir, publishConfig(), fixedClock(t0.Add(time.Minute)), true)
	submitAll(t, te, 1, applied0...)
	submitAll(t, te, 1, succ("infra", "R1", 1))
	te.Stop()
	for range 2 {
		late := enginetest.Start(t, dir, publishConfig(), fixedClock(t0.Add(time.Hour)), true)
		if p := forgeRecord(t, late, "R1"); p.Verdict != rollout.VerdictStuck || p.Seq != 2 {
			t.Fatalf("after restart: %+v, want stuck, the second verdict", p)
		}
		late.Stop()
	}
}

// TestProgressPublished: with a channel that shows progress (Slack), each
// layer that applies a rollout still applying is published for it, with
// how many have; the forge's outbox takes the verdict changes alone.
func TestProgressPublished(t *testing.T) {
	cfg := publishConfig()
	cfg.Progress = true
	te := enginetest.Start(t, t.TempDir(), cfg, fixedClock(t0.Add(time.Minute)), true)
	if err := te.DB.SetChannels(outbox.Channel{Name: "forge", Restate: true}, outbox.Channel{Name: "slack", Restate: true, Progress: true}); err != nil {
		t.Fatal(err)
	}
	submitAll(t, te, 1, applied0...)
	k := rollout.Key{Cluster: "default", Hash: hashOf("R1")}
	record := func(ch string) outbox.Publication {
		t.Helper()
		p, _, err := te.DB.Channel(ch).Publication(k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	submitAll(t, te, 1, succ("infra", "R1", 1))
	s := record("slack")
	if s.Verdict != rollout.VerdictApplying || s.Seq != 1 || s.Done != 1 || s.Expected != 3 {
		t.Fatalf("after the first layer: %+v", s)
	}
	submitAll(t, te, 1, succ("platform", "R1", 2))
	if s = record("slack"); s.Seq != 2 || s.Done != 2 || s.Verdict != rollout.VerdictApplying {
		t.Fatalf("after the second layer: %+v, want its progress published", s)
	}
	if f := record("forge"); f.Seq != 1 {
		t.Fatalf("the forge took the progress: %+v", f)
	}
	submitAll(t, te, 1, succ("apps", "R1", 3))
	// The record's second change: the progress shown before it was never
	// written (the store keeps it in memory).
	if s = record("slack"); s.Seq != 2 || s.Done != 3 || s.Verdict != rollout.VerdictApplied || s.Completed.IsZero() {
		t.Fatalf("once applied: %+v", s)
	}
}

// TestProgressRepublishedAtLoad: progress the outbox lost (the store keeps
// it in memory until a delivery's record: a stop or a crash loses it) is
// published again when the engine loads.
func TestProgressRepublishedAtLoad(t *testing.T) {
	cfg := publishConfig()
	cfg.Progress = true
	slack := outbox.Channel{Name: "slack", Progress: true}
	dir := t.TempDir()
	te := enginetest.Start(t, dir, cfg, fixedClock(t0.Add(time.Minute)), true)
	if err := te.DB.SetChannels(slack); err != nil {
		t.Fatal(err)
	}
	submitAll(t, te, 1, applied0...)
	submitAll(t, te, 1, succ("infra", "R1", 1))
	submitAll(t, te, 1, succ("platform", "R1", 2))
	te.Stop()

	db, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetChannels(slack); err != nil {
		t.Fatal(err)
	}
	k := rollout.Key{Cluster: "default", Hash: hashOf("R1")}
	// As after a crash that lost the second layer's progress, the first's
	// delivered.
	if err := db.Channel("slack").UpdatePublication(k, func(p *outbox.Publication) {
		p.Done, p.SentSeq, p.Sent = 1, p.Seq, p.Verdict
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.New(db, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), fixedClock(t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if p, _, err := db.Channel("slack").Publication(k); err != nil || p.Done != 2 || !p.Due() {
		t.Fatalf("after the load: %+v (%v), want the second layer's progress due again", p, err)
	}
}
