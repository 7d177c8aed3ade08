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
	spec := map[string]any{"interval": "10m", "path": "./" + l.Name, "prune": true, "wait": true,
		"sourceRef": map[string]any{"kind": flux.KindGitRepository, "name": l.Source}}
	if l.After != "" {
		spec["dependsOn"] = []any{map[string]any{"name": l.After}}
	}
	return w.tryCreate(ksGVR, map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": flux.KindKustomization,
		"metadata": map[string]any{"name": l.Name}, "spec": spec,
	}, w.fleetStatus(l, w.now.Add(-time.Hour)))
}

// ApplyFleetLayer rewrites the status of l, created by CreateFleetLayer,
// as kustomize-controller does once it has applied l.Rev at at: its
// inventory, history and conditions whole. Safe to call from several
// goroutines at once.
func (w *World) ApplyFleetLayer(l FleetLayer, at time.Time) error {
	ctx := context.Background()
	k, err := w.dc.Resource(ksGVR).Namespace(w.ns).Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	k.Object["status"] = w.fleetStatus(l, at)
	_, err = w.dc.Resource(ksGVR).Namespace(w.ns).UpdateStatus(ctx, k, metav1.UpdateOptions{})
	return err
}

// fleetStatus is a fleet layer's status once it applied l.Rev at at.
func (w *World) fleetStatus(l FleetLayer, at time.Time) map[string]any {
	ts := at.UTC().Format(time.RFC3339)
	entries := make([]any, l.Objects)
	for i := range entries {
		entries[i] = map[string]any{"id": fmt.Sprintf("%s_web-%d_apps_Deployment", l.Name, i), "v": "v1"}
	}
	history := make([]any, l.History)
	for i := range history {
		history[i] = map[string]any{"digest": fmt.Sprintf("sha256:%064d", i), "firstReconciled": ts, "lastReconciled": ts,
			"lastReconciledDuration": "2.1s", "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": int64(3),
			"metadata": map[string]any{"revision": l.Rev}}
	}
	return map[string]any{
		"observedGeneration": int64(0), "lastAppliedRevision": l.Rev, "lastAttemptedRevision": l.Rev, "lastHandledReconcileAt": ts,
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: " + l.Rev, "lastTransitionTime": ts},
			map[string]any{"type": "Healthy", "status": "True", "reason": "Succeeded", "message": "Health check passed in 2.1s", "lastTransitionTime": ts},
		},
		"history": history, "inventory": map[string]any{"entries": entries},
	}
}

// FleetRelease is a HelmRelease a fleet layer applied, as helm-controller
// leaves it once its chart's version is deployed: Ready and Released, a
// history of three releases, values in its spec.
type FleetRelease struct {
	Name, Layer, Version string
}

// CreateFleetRelease creates r. Safe to call from several goroutines at
// once: it reports errors instead of failing.
func (w *World) CreateFleetRelease(r FleetRelease) error {
	at := w.now.Add(-time.Hour).Format(time.RFC3339)
	cond := func(typ, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "reason": reason, "message": msg, "lastTransitionTime": at}
	}
	history := make([]any, 3)
	for i := range history {
		history[i] = map[string]any{"name": r.Name, "namespace": w.ns, "version": int64(3 - i), "status": "deployed", "chartName": "web",
			"chartVersion": r.Version, "appVersion": r.Version, "configDigest": "sha256:" + strings.Repeat("ab", 32),
			"digest": "sha256:" + strings.Repeat("cd", 32), "firstDeployed": at, "lastDeployed": at}
	}
	values := map[string]any{"replicaCount": int64(3), "image": map[string]any{"repository": "ghcr.io/acme/web", "tag": "v1.4.2"},
		"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "256Mi"}},
		"ingress":   map[string]any{"enabled": true, "hosts": []any{map[string]any{"host": r.Name + ".example.com", "paths": []any{"/"}}}}}
	return w.tryCreate(resource(flux.KindHelmRelease), map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": flux.KindHelmRelease,
		"metadata": map[string]any{"name": r.Name, "labels": map[string]any{
			flux.OwnerNameLabel: r.Layer, flux.OwnerNamespaceLabel: w.ns}},
		"spec": map[string]any{"interval": "10m", "releaseName": r.Name, "values": values,
			"chart": map[string]any{"spec": map[string]any{"chart": "web", "version": r.Version,
				"sourceRef": map[string]any{"kind": "HelmRepository", "name": "charts"}}}},
	}, map[string]any{
		"observedGeneration": int64(0), "lastAttemptedGeneration": int64(1), "lastAttemptedRevision": r.Version,
		"lastAttemptedReleaseAction": "upgrade", "lastAttemptedConfigDigest": "sha256:" + strings.Repeat("ab", 32),
		"storageNamespace": w.ns, "helmChart": w.ns + "/" + w.ns + "-" + r.Name, "history": history,
		"conditions": []any{
			cond("Ready", "UpgradeSucceeded", "Helm upgrade succeeded for release "+w.ns+"/"+r.Name+".v3 with chart web@"+r.Version),
			cond("Released", "UpgradeSucceeded", "Helm upgrade succeeded for release "+w.ns+"/"+r.Name+".v3 with chart web@"+r.Version),
		},
	})
}

// SetArtifact gives GitRepository name a new artifact, of revision, as
// source-controller does when it fetches a commit.
func (w *World) SetArtifact(name, revision string, at time.Time) {
	w.t.Helper()
	ctx := context.Background()
	g, err := w.dc.Resource(gitGVR).Namespace(w.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(g.Object, revision, "status", "artifact", "revision"); err != nil {
		w.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(g.Object, at.UTC().Format(time.RFC3339), "status", "artifact", "lastUpdateTime"); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.dc.Resource(gitGVR).Namespace(w.ns).UpdateStatus(ctx, g, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
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
