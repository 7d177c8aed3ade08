package engine_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestFollower: a follower's engine, fed the leader's observations, shows
// the same views; it writes nothing (no evidence, no mail, in a store the
// leader shares); and it drops a rollout the model would settle only once
// the leader's commit put it in the archive, so that a lookup always
// finds it, live or settled.
func TestFollower(t *testing.T) {
	clock := &movingClock{}
	clock.set(t0)
	cfg := settleConfig(time.Minute)
	cfg.MailTo = []string{"dev@example.com"}
	lead := enginetest.Start(t, t.TempDir(), cfg, clock.now, false)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fol, err := engine.NewFollower(engine.NewReader(lead.DB, log), lead.DB, cfg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	both := func(obs ...rollout.Observation) {
		t.Helper()
		for _, o := range obs {
			if err := lead.SubmitAll(ctx, []rollout.Observation{o}); err != nil {
				t.Fatal(err)
			}
			if err := fol.SubmitAll(ctx, []rollout.Observation{o}); err != nil {
				t.Fatal(err)
			}
		}
	}
	both(applied0...)
	both(succ("infra", "R1", 10), succ("platform", "R1", 11), succ("apps", "R1", 12))
	for _, label := range []string{"R0", "R1"} {
		l, f := viewOf(t, lead.Engine, label), viewOf(t, fol, label)
		if l.Verdict != f.Verdict || l.Summary != f.Summary {
			t.Fatalf("%s: follower shows %s (%s), leader %s (%s)", label, f.Verdict, f.Summary, l.Verdict, l.Summary)
		}
	}

	// R2 reaches the follower alone: shown there, written nowhere.
	if err := fol.SubmitAll(ctx, []rollout.Observation{prog("infra", "R2", 20)}); err != nil {
		t.Fatal(err)
	}
	if v := viewOf(t, fol, "R2"); v.Verdict != rollout.VerdictApplying {
		t.Fatalf("the follower shows R2 %s, want applying", v.Verdict)
	}
	if q := lead.Queued(t, hashOf("R2")); len(q) != 0 {
		t.Fatalf("the follower queued mails: %q", q)
	}
	again, err := engine.NewFollower(engine.NewReader(lead.DB, log), lead.DB, cfg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Lookup(engine.Query{Hash: hashOf("R2")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("R2 loaded from the store, which only the follower was told of: %v", err)
	}

	// An hour on, R0 (replaced on every layer) can settle.
	clock.set(t0.Add(time.Hour))
	for range 2 {
		settle(t, fol)
	}
	if !liveIn(fol, "R0") {
		t.Fatal("the follower settled R0 before the archive held it")
	}
	settle(t, lead.Engine)
	if liveIn(lead.Engine, "R0") {
		t.Fatal("the leader did not settle R0")
	}
	// A late observation of R0: the leader ignores it (settled); so does
	// the follower, which still holds R0, since the archive has it.
	late := fail("extra", "R0", 30, "HealthCheckFailed")
	both(late)
	if v := viewOf(t, fol, "R0"); v.Verdict != rollout.VerdictApplied {
		t.Fatalf("the follower took a late failure of R0, settled by the leader: %s", v.Verdict)
	}
	settle(t, fol) // finds it archived
	settle(t, fol) // settles it
	if liveIn(fol, "R0") {
		t.Fatal("the follower still holds R0, settled in the archive")
	}
	if v := viewOf(t, fol, "R0"); v.Verdict != rollout.VerdictApplied {
		t.Fatalf("R0 from the archive on the follower: %s", v.Verdict)
	}
}

func viewOf(t *testing.T, e *engine.Engine, label string) *rollout.View {
	t.Helper()
	v, err := e.Lookup(engine.Query{Hash: hashOf(label)})
	if err != nil {
		t.Fatalf("Lookup %s: %v", label, err)
	}
	return v
}

func liveIn(e *engine.Engine, label string) bool {
	for _, v := range e.Views() {
		if v.Hash == hashOf(label) {
			return true
		}
	}
	return false
}
