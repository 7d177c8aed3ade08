package engine_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// member is what the cluster reader says of a layer while label is its
// source's current revision.
func member(name, label string, sec int, sig rollout.Signal, dependsOn ...string) rollout.Observation {
	o := ob(name, label, sec, sig, "", "")
	for _, d := range dependsOn {
		o.DependsOn = append(o.DependsOn, "flux-system/"+d)
	}
	return o
}

func TestClusterExpectedLayers(t *testing.T) {
	tests := []struct {
		name  string
		obs   []rollout.Observation
		now   int
		want  rollout.Verdict
		check func(t *testing.T, v *rollout.View)
	}{
		{
			name: "a suspended layer is not expected",
			obs: []rollout.Observation{
				member("infra", "R1", 0, rollout.SignalExpected), member("platform", "R1", 0, rollout.SignalExpected, "infra"),
				member("apps", "R1", 0, rollout.SignalSuspended, "platform"),
				succ("infra", "R1", 1), succ("platform", "R1", 5),
			},
			want: rollout.VerdictApplied,
			check: func(t *testing.T, v *rollout.View) {
				if v.ExpectedFrom != "cluster" || v.Layers.Len() != 2 {
					t.Fatalf("expected from %s, layers %+v", v.ExpectedFrom, v.Layers)
				}
			},
		},
		{
			name: "a layer that carried the old revision but is on another source is not expected",
			obs: []rollout.Observation{
				succ("tenant", "R0", -100), // applied0 plus a layer events alone would expect
				member("infra", "R1", 0, rollout.SignalExpected), member("platform", "R1", 0, rollout.SignalExpected),
				member("apps", "R1", 0, rollout.SignalExpected),
				succ("infra", "R1", 1), succ("platform", "R1", 5), succ("apps", "R1", 9),
			},
			want: rollout.VerdictApplied,
		},
		{
			name: "an expected layer that has not spoken holds the rollout",
			obs: []rollout.Observation{
				member("infra", "R1", 0, rollout.SignalExpected), member("newcomer", "R1", 0, rollout.SignalExpected),
				succ("infra", "R1", 1),
			},
			want: rollout.VerdictApplying,
			check: func(t *testing.T, v *rollout.View) {
				if !slices.Equal(v.Behind, []string{"flux-system/newcomer"}) {
					t.Fatalf("behind %v", v.Behind)
				}
			},
		},
		{
			name: "suspended mid-rollout, then resumed: expected again",
			obs: []rollout.Observation{
				member("infra", "R1", 0, rollout.SignalExpected), member("apps", "R1", 0, rollout.SignalExpected),
				member("apps", "R1", 10, rollout.SignalSuspended), member("apps", "R1", 20, rollout.SignalExpected),
				succ("infra", "R1", 1),
			},
			want: rollout.VerdictApplying,
		},
		{
			name: "stuck names the root cause two tiers up the dependsOn chain",
			obs: []rollout.Observation{
				member("infra", "R1", 0, rollout.SignalExpected),
				member("platform", "R1", 0, rollout.SignalExpected, "infra"),
				member("apps", "R1", 0, rollout.SignalExpected, "platform"),
				member("edge", "R1", 0, rollout.SignalExpected, "apps"),
				succ("infra", "R1", 1), prog("apps", "R1", 3), waiting("edge", "R1", 4),
			},
			now:  31 * 60,
			want: rollout.VerdictStuck,
			check: func(t *testing.T, v *rollout.View) {
				// Events alone would blame apps (progressing before silent).
				if v.RootCause != "flux-system/platform" {
					t.Fatalf("root cause %q, want flux-system/platform", v.RootCause)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now == 0 {
				now = 600
			}
			h := start(t, t.TempDir(), defaultConfig(), fixedClock(t0.Add(time.Duration(now)*time.Second)))
			h.submit(applied0...)
			h.submit(tt.obs...)
			v := h.view("R1")
			if v.Verdict != tt.want {
				t.Fatalf("verdict %s (%s), want %s", v.Verdict, v.Summary, tt.want)
			}
			if tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

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
