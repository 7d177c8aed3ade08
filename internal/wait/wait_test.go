package wait

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestReportPrintsChangesOnly: an answer that changes nothing prints
// nothing; a verdict or a layer that moved prints one line.
func TestReportPrintsChangesOnly(t *testing.T) {
	var out bytes.Buffer
	w := &waiter{progress: &lines{w: &out}}
	view := func(verdict rollout.Verdict, apps rollout.LayerState) *verdictBody {
		v := &verdictBody{VerdictResponse: api.VerdictResponse{View: &rollout.View{Cluster: "prod", Hash: strings.Repeat("e5", 20),
			Verdict: verdict, Summary: "s", Layers: rollout.MakeLayers([]rollout.LayerView{
				{Name: "flux-system/apps", State: apps}, {Name: "flux-system/infra", State: rollout.LayerApplied}})}}}
		return v
	}
	steps := []struct {
		v    *verdictBody
		want []string
	}{
		{view(rollout.VerdictApplying, rollout.LayerPending), []string{"e5e5e5e on prod: applying (s)", "e5e5e5e on prod: flux-system/infra applied"}},
		{view(rollout.VerdictApplying, rollout.LayerPending), nil},
		{view(rollout.VerdictApplying, rollout.LayerProgressing), []string{"e5e5e5e on prod: flux-system/apps pending -> progressing"}},
		{view(rollout.VerdictApplied, rollout.LayerApplied), []string{"e5e5e5e on prod: applying -> applied (s)", "e5e5e5e on prod: flux-system/apps progressing -> applied"}},
	}
	for i, s := range steps {
		out.Reset()
		w.report(s.v)
		w.last = s.v
		got := strings.Split(strings.TrimSpace(out.String()), "\n")
		if out.Len() == 0 {
			got = nil
		}
		if strings.Join(got, "|") != strings.Join(s.want, "|") {
			t.Errorf("answer %d printed %q, want %q", i, got, s.want)
		}
	}
}
