package ui

import (
	"slices"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var tt0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(sec int) *time.Time {
	t := tt0.Add(time.Duration(sec) * time.Second)
	return &t
}

func rowNames(tl timeline) []string {
	var out []string
	for _, r := range tl.Rows {
		out = append(out, r.Name)
	}
	return out
}

// TestTimelineOrder: rows follow dependsOn when the cluster told it, and
// otherwise the order Flux took the layers in; bars run from a layer's
// first evidence to where it finished; marks sit at their times.
func TestTimelineOrder(t *testing.T) {
	layers := []rollout.LayerView{
		// apps depends on platform, platform on infra; apps' times alone
		// would put it before platform.
		{Name: "flux-system/apps", State: rollout.LayerApplied, Since: at(1), At: at(30), DependsOn: []string{"flux-system/platform"}},
		{Name: "flux-system/infra", State: rollout.LayerApplied, Since: at(2), At: at(10), Healthy: at(9)},
		{Name: "flux-system/platform", State: rollout.LayerApplied, Since: at(1), At: at(40), DependsOn: []string{"flux-system/infra"}},
		{Name: "flux-system/tenant", State: rollout.LayerPending},
	}
	v := &rollout.View{FirstSeen: tt0, LastSeen: *at(60), CompletedAt: at(60), Terminal: true, Verdict: rollout.VerdictApplied,
		Layers: rollout.MakeLayers(layers)}
	tl := newTimeline(v, tt0.Add(time.Hour))
	want := []string{"flux-system/infra", "flux-system/platform", "flux-system/apps", "flux-system/tenant"}
	if got := rowNames(tl); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	// Without dependsOn: by when they finished.
	plain := slices.Clone(layers)
	for i := range plain {
		plain[i].DependsOn = nil
	}
	v2 := *v
	v2.Layers = rollout.MakeLayers(plain)
	byTime := []string{"flux-system/infra", "flux-system/apps", "flux-system/platform", "flux-system/tenant"}
	if got := rowNames(newTimeline(&v2, tt0.Add(time.Hour))); !slices.Equal(got, byTime) {
		t.Fatalf("rows without dependsOn %v, want %v", got, byTime)
	}
	infra, apps, tenant := tl.Rows[0], tl.Rows[2], tl.Rows[3]
	if !infra.Bar || !apps.Bar || tenant.Bar {
		t.Fatalf("bars: infra %v apps %v tenant %v", infra.Bar, apps.Bar, tenant.Bar)
	}
	if apps.X >= infra.X || apps.X+apps.W <= infra.X+infra.W {
		t.Errorf("apps' bar (%v+%v) does not span from before infra's (%v+%v) to after it", apps.X, apps.W, infra.X, infra.W)
	}
	if len(infra.Marks) != 1 || infra.Marks[0].Kind != "passed" || infra.Marks[0].X <= infra.X || infra.Marks[0].X >= infra.X+infra.W {
		t.Errorf("infra's health mark %+v is not on its bar", infra.Marks)
	}
	if tl.Now != nil {
		t.Error("a final rollout has a now line")
	}
}

// TestTimelineReleases: each release a layer's apply changed is a row
// under its layer, from the apply to its result, with its failure (and
// what remediation did) on its own row rather than the layer's.
func TestTimelineReleases(t *testing.T) {
	layers := []rollout.LayerView{
		{Name: "flux-system/apps", State: rollout.LayerFailed, Since: at(1), At: at(12), Releases: []rollout.ReleaseView{
			{Kind: "HelmRelease", Namespace: "apps", Name: "web", State: rollout.LayerFailed, Reason: "UpgradeFailed", At: at(12), Since: *at(2)},
			{Kind: "HelmRelease", Namespace: "apps", Name: "api", State: rollout.LayerApplied, Reason: "UpgradeSucceeded", At: at(5), Since: *at(2)},
		}},
		{Name: "flux-system/infra", State: rollout.LayerApplied, Since: at(0), At: at(1)},
	}
	v := &rollout.View{FirstSeen: tt0, LastSeen: *at(12), Terminal: true, Verdict: rollout.VerdictFailed, Layers: rollout.MakeLayers(layers),
		Failures: []rollout.FailureView{{Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "apps", Name: "web"}, Reason: "UpgradeFailed", Message: "boom",
			Remediation: "Helm rollback to previous release apps/web.v4 succeeded", At: *at(12)}}}
	tl := newTimeline(v, tt0.Add(time.Hour))
	want := []string{"flux-system/infra", "flux-system/apps", "↳ apps/web", "↳ apps/api"}
	if got := rowNames(tl); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	apps, web, api := tl.Rows[1], tl.Rows[2], tl.Rows[3]
	if len(apps.Marks) != 0 || len(web.Marks) != 1 || web.Marks[0].Title != "UpgradeFailed: boom; then: Helm rollback to previous release apps/web.v4 succeeded" {
		t.Fatalf("the release's failure is not on its row: layer %+v, release %+v", apps.Marks, web.Marks)
	}
	if !api.Bar || api.State != string(rollout.LayerApplied) || api.X+api.W >= web.X+web.W || tl.Height != tlTop+4*tlRow+8 {
		t.Fatalf("release rows: api %+v web %+v height %d", api, web, tl.Height)
	}
}
