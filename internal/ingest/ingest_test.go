package ingest

import (
	"testing"

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
