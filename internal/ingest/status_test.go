package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

const (
	r1 = "main@sha1:1111111111111111111111111111111111111111"
	r2 = "main@sha1:2222222222222222222222222222222222222222"
)

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// kustomization is a Kustomization's status with a Ready condition (when not
// nil), and more conditions or history entries (those with lastReconciled),
// written as the API server serves it and read into Flux's type as the
// cluster reader reads it.
func kustomization(generation, observed int64, applied, attempted string, ready map[string]any, more ...map[string]any) *kustomizev1.Kustomization {
	u := map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "apps", "namespace": "flux-system", "generation": generation},
		"status": map[string]any{
			"observedGeneration": observed, "lastAppliedRevision": applied, "lastAttemptedRevision": attempted,
		},
	}
	var conds, hs []any
	if ready != nil {
		conds = append(conds, ready)
	}
	for _, m := range more {
		if _, ok := m["lastReconciled"]; ok {
			hs = append(hs, m)
		} else {
			conds = append(conds, m)
		}
	}
	if conds != nil {
		u["status"].(map[string]any)["conditions"] = conds
	}
	if hs != nil {
		u["status"].(map[string]any)["history"] = hs
	}
	k := &kustomizev1.Kustomization{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, k); err != nil {
		panic(err)
	}
	return k
}

// reconciling is kustomize-controller's Reconciling condition.
func reconciling(msg string) map[string]any {
	return map[string]any{"type": "Reconciling", "status": "True", "reason": "Progressing", "message": msg, "lastTransitionTime": at.Format(time.RFC3339)}
}

func ready(status, reason, msg string) map[string]any {
	return map[string]any{"type": "Ready", "status": status, "reason": reason, "message": msg, "lastTransitionTime": at.Format(time.RFC3339)}
}

// describe renders observations as "signal hash[:4] reason" lines.
func describe(obs []rollout.Observation) string {
	var out []string
	for _, o := range obs {
		line := fmt.Sprintf("%s %s %s", o.Signal, o.Hash[:4], o.Reason)
		for _, obj := range o.Objects {
			line += " " + obj.Kind + "/" + obj.Namespace + "/" + obj.Name
		}
		out = append(out, line)
	}
	return strings.Join(out, "; ")
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name string
		k    *kustomizev1.Kustomization
		wait string
		want string
	}{
		{"applied", kustomization(2, 2, r1, r1, ready("True", "ReconciliationSucceeded", "Applied revision: "+r1)),
			"", "succeeded 1111 ReconciliationSucceeded"},
		{"Ready for an older generation says nothing", kustomization(3, 2, r1, r1, ready("True", "ReconciliationSucceeded", "Applied revision: "+r1)),
			"", ""},
		{"prune failed names the objects", kustomization(1, 1, r1, r2, ready("False", "PruneFailed",
			"delete failed, errors: ConfigMap/apps/old delete failed: forbidden;")),
			"", "failed 2222 PruneFailed ConfigMap/apps/old"},
		{"health check failed", kustomization(1, 1, r1, r2, ready("False", "HealthCheckFailed", "timeout")),
			"", "failed 2222 HealthCheckFailed"},
		{"waiting for a dependency, on the source's current revision", kustomization(1, 1, r1, r1, ready("False", "DependencyNotReady", "dependencies")),
			r2, "waiting 2222 DependencyNotReady"},
		{"progressing: the revision the Reconciling condition names", kustomization(1, 1, r1, r1, ready("Unknown", "Progressing", "Reconciliation in progress"),
			reconciling("Fetching manifests for revision "+r2+" with a timeout of 30s")),
			"", "progressing 2222 Progressing"},
		{"progressing without a revision named: not lastAttemptedRevision, which may be the previous one",
			kustomization(1, 1, r1, r1, ready("Unknown", "Progressing", "Reconciliation in progress"), reconciling("Reconciliation in progress")),
			"", ""},
		{"health checks canceled for a newer revision", kustomization(1, 1, r1, r2, ready("False", "HealthCheckCanceled",
			"New reconciliation triggered by GitRepository/flux-system/fleet")),
			"", "canceled 2222 HealthCheckCanceled"},
		{"no Ready condition yet", kustomization(1, 0, "", "", nil), "", ""},
		{"history catches up a success", kustomization(1, 1, r2, r2, nil, map[string]any{
			"digest": "sha256:x", "firstReconciled": at.Format(time.RFC3339), "lastReconciled": at.Format(time.RFC3339),
			"lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": int64(3),
			"metadata": map[string]any{"revision": r1},
		}, map[string]any{
			"digest": "sha256:y", "lastReconciled": at.Format(time.RFC3339), "lastReconciledStatus": "HealthCheckFailed",
			"metadata": map[string]any{"revision": r2},
		}), "", "succeeded 1111 ReconciliationSucceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(Status(tt.k, "prod", tt.wait)); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
