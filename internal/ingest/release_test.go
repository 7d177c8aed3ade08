package ingest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// helmRelease is HelmRelease apps/web at generation 2, applied by layer
// flux-system/apps at 12:00:00, with status st (lastAttemptedGeneration
// and conditions, each condition {type, status, reason, message,
// second of its transition}), as the API server serves it.
func helmRelease(st map[string]any, conds ...[5]any) *helmv2.HelmRelease {
	var cs []any
	for _, c := range conds {
		cs = append(cs, map[string]any{"type": c[0], "status": c[1], "reason": c[2], "message": c[3],
			"lastTransitionTime": at.Add(time.Duration(c[4].(int)) * time.Second).Format(time.RFC3339)})
	}
	st["conditions"], st["observedGeneration"] = cs, int64(2)
	u := map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "generation": int64(2),
			"labels":        map[string]any{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
			"managedFields": []any{map[string]any{"manager": "kustomize-controller", "operation": "Apply", "time": at.Format(time.RFC3339)}}},
		"spec":   map[string]any{"interval": "1h", "chartRef": map[string]any{"kind": "OCIRepository", "name": "web"}},
		"status": st,
	}
	hr := &helmv2.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, hr); err != nil {
		panic(err)
	}
	return hr
}

// TestReleaseStatusTellsWhatHelmControllerDid: a HelmRelease's status,
// read at each stage of a failed upgrade that helm-controller rolls back,
// retries and gives up on (and of an install it uninstalls), says what it
// did as the failure's Remedy: its Remediated condition's step, the
// failure counter of the action, and Stalled. Before helm-controller
// acted on the spec, the status says so as a pending mark, which no
// report of its action is ever ordered before.
func TestReleaseStatusTellsWhatHelmControllerDid(t *testing.T) {
	const (
		upgradeFailed = "Helm upgrade failed for release apps/web with chart web@1.0.0: ConfigMap \"Invalid_Name\" is invalid"
		rolledBack1   = "Helm rollback to previous release apps/web.v1 with chart web@1.0.0 succeeded"
		rolledBack3   = "Helm rollback to previous release apps/web.v3 with chart web@1.0.0 succeeded"
		uninstalled   = "Helm uninstall remediation for release apps/web.v1 with chart web@1.0.0 succeeded"
	)
	failed := func(action string, failures int64) map[string]any {
		return map[string]any{"lastAttemptedGeneration": int64(2), "lastAttemptedReleaseAction": action,
			action + "Failures": failures, "failures": failures}
	}
	step := func(kind rollout.StepKind, version int, reason string, sec int) rollout.Step {
		return rollout.Step{Kind: kind, Version: version, Reason: reason, At: at.Add(time.Duration(sec) * time.Second)}
	}
	stall := func(action string, sec int) *rollout.Mark {
		return &rollout.Mark{At: at.Add(time.Duration(sec) * time.Second), Signal: rollout.SignalFailed, Reason: "RetriesExceeded",
			Message: "Failed to " + action + " after 2 attempt(s)"}
	}
	for _, tt := range []struct {
		name   string
		hr     *helmv2.HelmRelease
		signal rollout.Signal
		remedy *rollout.Remedy
	}{
		{"applied, not acted on", helmRelease(map[string]any{"lastAttemptedGeneration": int64(1)},
			[5]any{"Ready", "True", "UpgradeSucceeded", "Helm upgrade succeeded", -60}), rollout.SignalPending, nil},
		{"the upgrade failed", helmRelease(failed("upgrade", 1),
			[5]any{"Ready", "False", "UpgradeFailed", upgradeFailed, 1},
			[5]any{"Released", "False", "UpgradeFailed", upgradeFailed, 1}),
			rollout.SignalFailed, &rollout.Remedy{Attempts: 1}},
		{"rolled back", helmRelease(failed("upgrade", 1),
			[5]any{"Ready", "False", "RollbackSucceeded", rolledBack1, 1},
			[5]any{"Released", "False", "UpgradeFailed", upgradeFailed, 1},
			[5]any{"Remediated", "True", "RollbackSucceeded", rolledBack1, 1}),
			rollout.SignalFailed, &rollout.Remedy{Attempts: 1, Remedied: 1, Steps: []rollout.Step{step(rollout.StepRolledBack, 1, "RollbackSucceeded", 1)}}},
		{"retried, failed again", helmRelease(failed("upgrade", 2),
			[5]any{"Ready", "False", "UpgradeFailed", upgradeFailed, 12},
			[5]any{"Released", "False", "UpgradeFailed", upgradeFailed, 12}),
			rollout.SignalFailed, &rollout.Remedy{Attempts: 2}},
		{"rolled back again, stalled", helmRelease(failed("upgrade", 2),
			[5]any{"Ready", "False", "RollbackSucceeded", rolledBack3, 12},
			[5]any{"Released", "False", "UpgradeFailed", upgradeFailed, 12},
			[5]any{"Remediated", "True", "RollbackSucceeded", rolledBack3, 12},
			[5]any{"Stalled", "True", "RetriesExceeded", "Failed to upgrade after 2 attempt(s)", 12}),
			rollout.SignalFailed, &rollout.Remedy{Attempts: 2, Remedied: 2, Steps: []rollout.Step{step(rollout.StepRolledBack, 3, "RollbackSucceeded", 12)}, Stalled: stall("upgrade", 12)}},
		{"an install uninstalled, stalled", helmRelease(failed("install", 2),
			[5]any{"Ready", "False", "UninstallSucceeded", uninstalled, 12},
			[5]any{"Released", "False", "InstallFailed", "Helm install failed for release apps/web with chart web@1.0.0: x", 12},
			[5]any{"Remediated", "True", "UninstallSucceeded", uninstalled, 12},
			[5]any{"Stalled", "True", "RetriesExceeded", "Failed to install after 2 attempt(s)", 12}),
			rollout.SignalFailed, &rollout.Remedy{Attempts: 2, Remedied: 2, Steps: []rollout.Step{step(rollout.StepUninstalled, 1, "UninstallSucceeded", 12)}, Stalled: stall("install", 12)}},
	} {
		obs := ReleaseStatus(tt.hr, "prod", nil)
		if len(obs) != 1 {
			t.Fatalf("%s: %d observations, want 1: %+v", tt.name, len(obs), obs)
		}
		o := obs[0]
		if o.Signal != tt.signal || !reflect.DeepEqual(o.Remedy, tt.remedy) {
			t.Errorf("%s: %s with remedy %+v\nwant %s with %+v", tt.name, o.Signal, o.Remedy, tt.signal, tt.remedy)
		}
		if err := (&rollout.Model{}).Normalise(&o); err != nil && tt.signal != 0 {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestReleaseEventTellsItsRemediation: a remediation's event carries its
// step; a plain uninstall's (the HelmRelease deleted) does not.
func TestReleaseEventTellsItsRemediation(t *testing.T) {
	for _, tt := range []struct {
		reason, msg string
		want        *rollout.Remedy
	}{
		{"RollbackSucceeded", "Helm rollback to previous release apps/web.v3 with chart web@1.0.0 succeeded",
			&rollout.Remedy{Steps: []rollout.Step{{Kind: rollout.StepRolledBack, Version: 3, Reason: "RollbackSucceeded", At: at}}}},
		{"UninstallFailed", "Helm uninstall remediation for release apps/web.v1 with chart web@1.0.0 failed: boom\n\nLast Helm logs:\n\nx",
			&rollout.Remedy{Steps: []rollout.Step{{Kind: rollout.StepUninstallFailed, Version: 1, Reason: "UninstallFailed", Error: "boom", At: at}}}},
		{"UninstallSucceeded", "Helm uninstall succeeded for release apps/web.v1 with chart web@1.0.0", nil},
		{"UpgradeFailed", "Helm upgrade failed for release apps/web with chart web@1.0.0: x", nil},
	} {
		d := decodeRelease(t, tt.reason, tt.msg)
		o, ok := Event(d)
		if !ok || !reflect.DeepEqual(o.Remedy, tt.want) {
			t.Errorf("%s: %+v (%v), want remedy %+v", tt.reason, o.Remedy, ok, tt.want)
		}
	}
}

// decodeRelease is an event of HelmRelease apps/web, as notification-
// controller sends it, decoded.
func decodeRelease(t *testing.T, reason, msg string) flux.Decoded {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"involvedObject": map[string]any{"kind": "HelmRelease", "namespace": "apps", "name": "web"},
		"severity":       "info", "timestamp": at.Format(time.RFC3339), "reason": reason, "message": msg,
		"metadata": map[string]any{"revision": "1.0.0"}, "reportingController": "helm-controller",
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := flux.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
