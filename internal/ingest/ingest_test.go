package ingest

import (
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func TestSignal(t *testing.T) {
	tests := []struct {
		kind, reason, severity string
		want                   rollout.Signal
	}{
		{flux.KindKustomization, "Progressing", "info", rollout.SignalProgressing},
		{flux.KindKustomization, "ReconciliationSucceeded", "info", rollout.SignalSucceeded},
		{flux.KindKustomization, "DependencyNotReady", "info", rollout.SignalWaiting},
		{flux.KindKustomization, "HealthCheckCanceled", "info", rollout.SignalCanceled},
		{flux.KindKustomization, "PruneFailed", "error", rollout.SignalFailed},
		{flux.KindKustomization, "HealthCheckFailed", "error", rollout.SignalFailed},
		{flux.KindKustomization, "ReconciliationFailed", "error", rollout.SignalFailed},
		{flux.KindKustomization, "BuildFailed", "error", rollout.SignalFailed},
		{flux.KindKustomization, "ArtifactFailed", "error", rollout.SignalFailed},
		{flux.KindKustomization, "AccessDenied", "error", rollout.SignalFailed},
		{flux.KindKustomization, "SomethingNew", "error", rollout.SignalFailed},
		{flux.KindKustomization, "PruneFailed", "info", rollout.SignalFailed},
		{flux.KindKustomization, "SomethingNew", "info", rollout.SignalProgressing},
		{flux.KindGitRepository, "NewArtifact", "info", rollout.SignalArtifact},
		{flux.KindOCIRepository, "NewArtifact", "info", rollout.SignalArtifact},
		{flux.KindGitRepository, "GitOperationFailed", "error", 0},
		{flux.KindHelmRelease, "UpgradeFailed", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "InstallFailed", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "TestFailed", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "RollbackFailed", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "ValuesError", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "ArtifactFailed", "error", rollout.SignalFailed},
		{flux.KindHelmRelease, "UpgradeSucceeded", "info", rollout.SignalSucceeded},
		{flux.KindHelmRelease, "InstallSucceeded", "info", rollout.SignalSucceeded},
		{flux.KindHelmRelease, "TestSucceeded", "info", rollout.SignalSucceeded},
		{flux.KindHelmRelease, "RollbackSucceeded", "info", rollout.SignalProgressing},
		{flux.KindHelmRelease, "UninstallSucceeded", "info", rollout.SignalProgressing},
		{flux.KindHelmRelease, "DependencyNotReady", "info", rollout.SignalWaiting},
		{flux.KindHelmRelease, "DriftDetected", "info", 0},
		{flux.KindHelmRelease, "DriftCorrectionFailed", "error", 0},
		{flux.KindHelmRelease, "SomethingNew", "info", 0},
		{flux.KindHelmRelease, "SomethingNew", "error", rollout.SignalFailed},
		{"HelmChart", "ChartPullSucceeded", "info", 0},
	}
	for _, tt := range tests {
		if got := Signal(tt.kind, tt.reason, tt.severity); got != tt.want {
			t.Errorf("Signal(%s, %s, %s) = %v, want %v", tt.kind, tt.reason, tt.severity, got, tt.want)
		}
	}
}

// TestHealthCheckPassed: of the clean scenario's events, exactly the ones
// kustomize-controller sent for passed health checks say so.
func TestHealthCheckPassed(t *testing.T) {
	reqs, err := fixture.Received("clean")
	if err != nil {
		t.Fatal(err)
	}
	healthy := 0
	for _, r := range reqs {
		d, err := flux.Decode([]byte(r.Body))
		if err != nil {
			t.Fatal(err)
		}
		o, ok := Event(d)
		if !ok {
			continue
		}
		if want := strings.HasPrefix(d.Message, "Health check passed"); o.Healthy != want {
			t.Errorf("seq %d %s %q: healthy %v", r.Seq, d.Reason, d.Message, o.Healthy)
		}
		if o.Healthy {
			healthy++
		}
	}
	if healthy == 0 {
		t.Fatal("no health check passed in the clean scenario")
	}
}

// TestFailureClass: every reason Flux fails a revision with has a class,
// and an error of another reason is a failure of no class.
func TestFailureClass(t *testing.T) {
	for _, tt := range []struct {
		reason string
		want   rollout.FailureClass
	}{
		{flux.ReasonPruneFailed, rollout.FailurePrune},
		{flux.ReasonHealthCheckFailed, rollout.FailureHealth},
		{flux.ReasonBuildFailed, rollout.FailureBuild},
		{flux.ReasonReconciliationFailed, rollout.FailureApply},
		{flux.ReasonAccessDenied, rollout.FailureAccess},
		{flux.ReasonArtifactFailed, rollout.FailureArtifact},
		{flux.ReasonInvalidCELExpression, rollout.FailureConfig},
		{flux.ReasonFeatureGateDisabled, rollout.FailureConfig},
		{"SomethingNew", rollout.FailureOther},
	} {
		if got := FailureClass(tt.reason); got != tt.want {
			t.Errorf("FailureClass(%s) = %q, want %q", tt.reason, got, tt.want)
		}
		if failing(tt.reason) != (tt.want != rollout.FailureOther) || KnownReason(tt.reason) != failing(tt.reason) {
			t.Errorf("%s: failing %v, known %v", tt.reason, failing(tt.reason), KnownReason(tt.reason))
		}
	}
	d := flux.Decoded{}
	d.InvolvedObject.Kind, d.Reason, d.Severity, d.Revision = flux.KindKustomization, flux.ReasonPruneFailed, flux.SeverityError, "main@sha1:abc"
	d.Rev.Hash = "abc"
	if o, ok := Event(d); !ok || o.Class != rollout.FailurePrune {
		t.Errorf("a PruneFailed event observed as %+v", o)
	}
}

// TestReleaseEventNamesItsCommit: a release's event names no revision (the
// model attributes it), but the commit its chart's version or its
// annotation names; a rollback's chart is the release it went back to,
// whose version names no commit of the failure it remedies.
func TestReleaseEventNamesItsCommit(t *testing.T) {
	const version = `"revision":"1.0.0+0123456789ab"`
	for _, tt := range []struct {
		name, reason, meta, want string
	}{
		{"an upgrade's chart", "UpgradeFailed", version, "0123456789ab"},
		{"a rollback's chart", "RollbackSucceeded", version, ""},
		{"a rollback's annotation", "RollbackSucceeded", version + `,"commit":"main@sha1:` + strings.Repeat("c", 40) + `"`, strings.Repeat("c", 40)},
	} {
		body := `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"info","timestamp":"2026-08-07T10:15:30Z",` +
			`"reason":"` + tt.reason + `","message":"Helm","metadata":{` + tt.meta + `}}`
		d, err := flux.Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		o, ok := Event(d)
		if !ok || o.Commit != tt.want || o.Revision != "" || o.Hash != "" || !o.Emitter.IsRelease() {
			t.Errorf("%s: Event = %+v, %v; want commit %q", tt.name, o, ok, tt.want)
		}
	}
}
