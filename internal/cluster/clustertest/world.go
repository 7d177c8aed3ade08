package clustertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

var (
	ksGVR  = flux.Kustomizations()
	gitGVR = resource(flux.KindGitRepository)
	nsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// resource is what the cluster reader watches for kind.
func resource(kind string) schema.GroupVersionResource {
	k, _ := flux.KindOf(kind)
	return k.Resource
}

// NewWorld creates namespace ns; times in it are relative to now.
func (c *Cluster) NewWorld(t testing.TB, ns string, now time.Time) *World {
	t.Helper()
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := dc.Resource(nsGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &World{t: t, dc: dc, ns: ns, now: now}
}

// World writes Flux objects and their status into one namespace, the way
// Flux's controllers write them.
type World struct {
	t   testing.TB
	dc  dynamic.Interface
	ns  string
	now time.Time
}

func (w *World) create(gvr schema.GroupVersionResource, obj map[string]any, status map[string]any) {
	w.t.Helper()
	if err := w.tryCreate(gvr, obj, status); err != nil {
		w.t.Fatal(err)
	}
}

// tryCreate creates obj and then writes its status, as Flux's controllers
// do; it reports errors instead of failing the test, so that goroutines
// other than the test's can call it.
func (w *World) tryCreate(gvr schema.GroupVersionResource, obj map[string]any, status map[string]any) error {
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: obj}
	u.SetNamespace(w.ns)
	got, err := w.dc.Resource(gvr).Namespace(w.ns).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create %s: %w", u.GetName(), err)
	}
	if status == nil {
		return nil
	}
	if _, ok := status["observedGeneration"]; ok {
		status["observedGeneration"] = got.GetGeneration()
	}
	got.Object["status"] = status
	if _, err := w.dc.Resource(gvr).Namespace(w.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of %s: %w", u.GetName(), err)
	}
	return nil
}

// FleetLayer is a Kustomization as kustomize-controller leaves it once it
// applied Rev, for the benchmarks of a large fleet: Ready and Healthy,
// History entries of Rev, and Objects entries in its inventory.
type FleetLayer struct {
	Name, Source, Rev string
	After             string // the layer it depends on, or ""
	Objects, History  int
}

// CreateFleetLayer creates l on the GitRepository l.Source. Safe to call
// from several goroutines at once: it reports errors instead of failing.
func (w *World) CreateFleetLayer(l FleetLayer) error {
	at := w.now.Add(-time.Hour).Format(time.RFC3339)
	entries := make([]any, l.Objects)
	for i := range entries {
		entries[i] = map[string]any{"id": fmt.Sprintf("%s_web-%d_apps_Deployment", l.Name, i), "v": "v1"}
	}
	history := make([]any, l.History)
	for i := range history {
		history[i] = map[string]any{"digest": fmt.Sprintf("sha256:%064d", i), "firstReconciled": at, "lastReconciled": at,
			"lastReconciledDuration": "2.1s", "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": int64(3),
			"metadata": map[string]any{"revision": l.Rev}}
	}
	spec := map[string]any{"interval": "10m", "path": "./" + l.Name, "prune": true, "wait": true,
		"sourceRef": map[string]any{"kind": flux.KindGitRepository, "name": l.Source}}
	if l.After != "" {
		spec["dependsOn"] = []any{map[string]any{"name": l.After}}
	}
	return w.tryCreate(ksGVR, map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": flux.KindKustomization,
		"metadata": map[string]any{"name": l.Name}, "spec": spec,
	}, map[string]any{
		"observedGeneration": int64(0), "lastAppliedRevision": l.Rev, "lastAttemptedRevision": l.Rev, "lastHandledReconcileAt": at,
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: " + l.Rev, "lastTransitionTime": at},
			map[string]any{"type": "Healthy", "status": "True", "reason": "Succeeded", "message": "Health check passed in 2.1s", "lastTransitionTime": at},
		},
		"history": history, "inventory": map[string]any{"entries": entries},
	})
}

// Source creates a GitRepository whose current artifact is revision.
func (w *World) Source(name, revision string) {
	w.SourceAt(name, revision, "https://example.com/fleet.git")
}

// SourceAt is Source of the repository at url.
func (w *World) SourceAt(name, revision, url string) {
	w.create(gitGVR, map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"interval": "1m", "url": url},
	}, map[string]any{"artifact": map[string]any{
		"revision": revision, "lastUpdateTime": w.now.Add(-10 * time.Minute).Format(time.RFC3339),
		"path": "x", "url": "http://x", "digest": "sha256:" + strings.Repeat("0", 64),
	}})
}

// Layer is a Kustomization and its status.
type Layer struct {
	Name, Source string
	DependsOn    []string
	Suspend      bool
	Ready        map[string]any // the Ready condition; nil: none
	Applied      string         // lastAppliedRevision
	Attempted    string         // lastAttemptedRevision
	History      []any          // status.history entries
}

// Layer creates a Kustomization on a GitRepository of the namespace.
func (w *World) Layer(l Layer) {
	var deps []any
	for _, d := range l.DependsOn {
		deps = append(deps, map[string]any{"name": d})
	}
	spec := map[string]any{
		"interval": "1m", "path": "./" + l.Name, "prune": true, "suspend": l.Suspend,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": l.Source},
	}
	if deps != nil {
		spec["dependsOn"] = deps
	}
	status := map[string]any{"observedGeneration": int64(0)}
	if l.Applied != "" {
		status["lastAppliedRevision"] = l.Applied
	}
	if l.Attempted != "" {
		status["lastAttemptedRevision"] = l.Attempted
	}
	if l.Ready != nil {
		status["conditions"] = []any{l.Ready}
	}
	if l.History != nil {
		status["history"] = l.History
	}
	w.create(ksGVR, map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": l.Name}, "spec": spec,
	}, status)
}

// Ready is a Ready condition that last changed ago.
func (w *World) Ready(status, reason, msg string, ago time.Duration) map[string]any {
	return map[string]any{
		"type": "Ready", "status": status, "reason": reason, "message": msg,
		"lastTransitionTime": w.now.Add(-ago).Format(time.RFC3339),
	}
}

// HistoryEntry is a status.history entry of a revision that succeeded,
// first and last reconciled at those times.
func HistoryEntry(revision string, first, last time.Time) map[string]any {
	d := sha256.Sum256([]byte(revision))
	return map[string]any{"digest": "sha256:" + hex.EncodeToString(d[:]), "firstReconciled": first.Format(time.RFC3339),
		"lastReconciled": last.Format(time.RFC3339), "lastReconciledDuration": "1s", "lastReconciledStatus": "ReconciliationSucceeded",
		"totalReconciliations": int64(1), "metadata": map[string]any{"revision": revision}}
}

// Namespace is the world's namespace.
func (w *World) Namespace() string { return w.ns }

// SetStatus rewrites a Kustomization's status, as kustomize-controller
// does when it reconciles.
func (w *World) SetStatus(name, applied, attempted string, ready map[string]any) {
	w.t.Helper()
	ctx := context.Background()
	k, err := w.dc.Resource(ksGVR).Namespace(w.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	k.Object["status"] = map[string]any{
		"observedGeneration": k.GetGeneration(), "lastAppliedRevision": applied, "lastAttemptedRevision": attempted,
		"conditions": []any{ready},
	}
	if _, err := w.dc.Resource(ksGVR).Namespace(w.ns).UpdateStatus(ctx, k, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// Delete deletes a Kustomization.
func (w *World) Delete(name string) {
	w.t.Helper()
	if err := w.dc.Resource(ksGVR).Namespace(w.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		w.t.Fatal(err)
	}
}
