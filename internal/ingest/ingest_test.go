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
		{"HelmRelease", "UpgradeFailed", "error", 0},
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
