package engine_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func mailConfig(to ...string) rollout.Config {
	cfg := defaultConfig()
	cfg.MailTo = to
	return cfg
}

func submitAll(t *testing.T, te *enginetest.Engine, times int, obs ...rollout.Observation) {
	t.Helper()
	for range times {
		for _, o := range obs {
			if err := te.Submit(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestMailsDueOnce(t *testing.T) {
	prune := fail("apps", "R1", 9, "PruneFailed")
	prune.Objects = []rollout.Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old", Error: "forbidden"}}
	tests := []struct {
		name string
		obs  []rollout.Observation
		want []string
	}{
		{
			name: "a clean rollout: one applying, one applied",
			obs:  []rollout.Observation{waiting("apps", "R1", 0), succ("infra", "R1", 1), succ("platform", "R1", 5), succ("apps", "R1", 9), succ("apps", "R1", 300)},
			want: []string{"applied ops@example.com", "applying ops@example.com"},
		},
		{
			name: "a prune failure: one mail naming the object",
			obs:  []rollout.Observation{succ("infra", "R1", 1), succ("platform", "R1", 5), prune},
			want: []string{"applying ops@example.com", "prune-failed flux-system/apps ConfigMap/apps/old ops@example.com"},
		},
		{
			name: "a health check failure, then a recovery: one failed mail",
			obs:  []rollout.Observation{succ("infra", "R1", 1), fail("platform", "R1", 5, "HealthCheckFailed"), succ("platform", "R1", 60), succ("apps", "R1", 70)},
			want: []string{"applying ops@example.com", "failed flux-system/platform HealthCheckFailed ops@example.com"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			te := enginetest.Start(t, t.TempDir(), mailConfig("ops@example.com"), fixedClock(t0.Add(10*time.Minute)), true)
			submitAll(t, te, 1, applied0...)
			submitAll(t, te, 3, tt.obs...) // every event delivered three times
			if !slices.Equal(onlyR1(t, te), tt.want) {
				t.Fatalf("outbox for R1:\n got %q\nwant %q", onlyR1(t, te), tt.want)
			}
		})
	}
}

// onlyR1 lists the queued mails about R1.
func onlyR1(t *testing.T, te *enginetest.Engine) []string { return te.Queued(t, hashOf("R1")) }

// TestNoMailTwiceAcrossRestarts: after a restart, with more recipients
// configured, a repeat of known evidence mails no one, and the old
// rollout is not mailed to the new recipient.
func TestNoMailTwiceAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	clock := fixedClock(t0.Add(10 * time.Minute))
	te := enginetest.Start(t, dir, mailConfig("ops@example.com"), clock, true)
	obs := append(append([]rollout.Observation{}, applied0...), succ("infra", "R1", 1), succ("platform", "R1", 5), succ("apps", "R1", 9))
	submitAll(t, te, 1, obs...)
	before := onlyR1(t, te)
	te.Stop()

	te2 := enginetest.Start(t, dir, mailConfig("ops@example.com", "new@example.com"), clock, true)
	submitAll(t, te2, 2, obs...)
	if got := onlyR1(t, te2); !slices.Equal(got, before) {
		t.Fatalf("after restart:\n got %q\nwant %q", got, before)
	}
}

// TestStuckMail: the deadline passing, with no new evidence, makes the stuck
// mail due, in the engine's own timer.
func TestStuckMail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		te := enginetest.Start(t, t.TempDir(), mailConfig("ops@example.com"), time.Now, true)
		woke := make(chan struct{}, 8)
		te.OnMail(func() { woke <- struct{}{} })
		base := time.Now().UTC()
		at := func(o rollout.Observation, sec int) rollout.Observation {
			o.At = base.Add(time.Duration(sec) * time.Second)
			return o
		}
		submitAll(t, te, 1, at(succ("infra", "R0", 0), -60), at(succ("apps", "R0", 0), -60), at(succ("infra", "R1", 0), 1))
		time.Sleep(31 * time.Minute)
		synctest.Wait()
		want := []string{"applying ops@example.com", "stuck ops@example.com"}
		if got := onlyR1(t, te); !slices.Equal(got, want) {
			t.Fatalf("outbox %q, want %q", got, want)
		}
		if len(woke) == 0 {
			t.Fatal("the dispatcher was not told of the stuck mail")
		}
		te.Stop()
	})
}

// TestStuckMailWhenDownAtTheDeadline: the service was down when a rollout's
// deadline passed; on restart the stuck mail is due, to the recipients
// configured then, and goes once.
func TestStuckMailWhenDownAtTheDeadline(t *testing.T) {
	dir := t.TempDir()
	te := enginetest.Start(t, dir, mailConfig("ops@example.com"), fixedClock(t0.Add(time.Minute)), true)
	submitAll(t, te, 1, applied0...)
	submitAll(t, te, 1, succ("infra", "R1", 1))
	te.Stop()

	for range 2 { // and a second restart mails nothing more
		late := enginetest.Start(t, dir, mailConfig("ops@example.com", "new@example.com"), fixedClock(t0.Add(time.Hour)), true)
		if v, _ := late.Lookup(engine.Query{Hash: hashOf("R1")}); v == nil || v.Verdict != rollout.VerdictStuck {
			t.Fatalf("R1 after restart: %+v", v)
		}
		want := []string{"applying ops@example.com", "stuck new@example.com", "stuck ops@example.com"}
		if got := onlyR1(t, late); !slices.Equal(got, want) {
			t.Fatalf("outbox %q, want %q", got, want)
		}
		late.Stop()
	}
}
