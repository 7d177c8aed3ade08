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

// TestPrintVerdictTellsWhatHelmControllerDid: a release's failure prints
// Helm's error line (not its logs) and what helm-controller did next, in
// the log and in GitHub's annotation.
func TestPrintVerdictTellsWhatHelmControllerDid(t *testing.T) {
	const story = "rolled back to v1: the cluster runs the previous release; stalled (Failed to upgrade after 1 attempt(s)): a new commit is needed"
	v := &verdictBody{VerdictResponse: api.VerdictResponse{View: &rollout.View{Cluster: "prod", Revision: "main@sha1:" + strings.Repeat("e5", 20),
		Hash: strings.Repeat("e5", 20), Verdict: rollout.VerdictFailed, Terminal: true, Summary: "s",
		Failures: []rollout.FailureView{{Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "apps", Name: "web"}, Reason: "UpgradeFailed",
			Message:     "Helm upgrade failed for release apps/web with chart web@1.0.0: boom\n\nLast Helm logs:\n\nsecret log line",
			Remediation: story, Stalled: true}}}}}
	var out bytes.Buffer
	printVerdict(&out, v, "e5e5e5e")
	got := out.String()
	if !strings.Contains(got, "  Helm upgrade failed for release apps/web with chart web@1.0.0: boom\n  then: "+story+"\n") || strings.Contains(got, "secret log line") {
		t.Errorf("printed\n%s", got)
	}
	out.Reset()
	annotate(&out, []*waiter{{last: v}})
	if !strings.Contains(out.String(), "then: "+story) || strings.Contains(out.String(), "secret log line") {
		t.Errorf("annotation\n%s", out.String())
	}
}

// TestArtifactNamedByItsCommit: an OCI rollout's progress and verdict
// lines name the commit its artifact was built from, the artifact beside
// it in the verdict.
func TestArtifactNamedByItsCommit(t *testing.T) {
	digest := strings.Repeat("d", 64)
	v := &verdictBody{VerdictResponse: api.VerdictResponse{View: &rollout.View{Cluster: "prod", Revision: "latest@sha256:" + digest, Hash: digest,
		Origin: "main@sha1:" + strings.Repeat("c", 40), OriginHash: strings.Repeat("c", 40), Verdict: rollout.VerdictApplied, Terminal: true, Summary: "s"}}}
	var out bytes.Buffer
	w := &waiter{progress: &lines{w: &out}}
	w.report(v)
	if got := out.String(); !strings.HasPrefix(got, "ccccccc on prod: applied") {
		t.Errorf("progress %q, want it named by the commit", got)
	}
	out.Reset()
	printVerdict(&out, v, "ccccccc")
	if want := "main@sha1:" + strings.Repeat("c", 40) + " (artifact latest@sha256:" + digest + ") on prod: applied (s)\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
