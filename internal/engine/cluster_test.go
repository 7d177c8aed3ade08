package engine_test

import (
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestFixtureSuspendedWithCluster: the suspended capture, with what the
// cluster says (apps suspended), gives the README's answer: applied.
func TestFixtureSuspendedWithCluster(t *testing.T) {
	rev := labels(t, fixture.Scenarios...)
	h := start(t, t.TempDir(), defaultConfig(), fixedClock(fixtureEnd.Add(time.Hour)))
	for _, name := range fixture.Scenarios[:9] { // up to and including "suspended"
		h.submit(scenario(t, name, false)...)
	}
	at := time.Date(2026, 11, 30, 12, 47, 35, 0, time.UTC)
	for _, m := range []struct {
		layer string
		sig   rollout.Signal
	}{{"infra", rollout.SignalExpected}, {"platform", rollout.SignalExpected}, {"apps", rollout.SignalSuspended}} {
		o := rollout.Observation{
			Emitter: layer(m.layer), Revision: "main@sha1:" + rev["R8"], Hash: rev["R8"], At: at, Signal: m.sig,
		}
		h.submit(o)
	}
	v := h.view8(rev)
	if v.Verdict != rollout.VerdictApplied || v.ExpectedFrom != "cluster" {
		t.Fatalf("R8 %s from %s: %s", v.Verdict, v.ExpectedFrom, v.Summary)
	}
}
