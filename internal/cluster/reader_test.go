package cluster_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout/rollouttest"
)

var (
	ksGVR  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	gitGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
)

func hashOf(label string) string {
	s := sha1.Sum([]byte(label))
	return hex.EncodeToString(s[:])
}

func revOf(label string) string { return "main@sha1:" + hashOf(label) }

// fake cluster state, written the way Flux's controllers write it.
type world struct {
	t   *testing.T
	dc  dynamic.Interface
	ns  string
	now time.Time
}

func (w *world) create(gvr schema.GroupVersionResource, obj map[string]any, status map[string]any) {
	w.t.Helper()
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: obj}
	u.SetNamespace(w.ns)
	got, err := w.dc.Resource(gvr).Namespace(w.ns).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatalf("create %s: %v", u.GetName(), err)
	}
	if status == nil {
		return
	}
	if _, ok := status["observedGeneration"]; ok {
		status["observedGeneration"] = got.GetGeneration()
	}
	got.Object["status"] = status
	if _, err := w.dc.Resource(gvr).Namespace(w.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		w.t.Fatalf("status of %s: %v", u.GetName(), err)
	}
}

func (w *world) source(name, label string) {
	w.create(gitGVR, map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"interval": "1m", "url": "https://example.com/fleet.git"},
	}, map[string]any{"artifact": map[string]any{
		"revision": revOf(label), "lastUpdateTime": w.now.Add(-10 * time.Minute).Format(time.RFC3339),
		"path": "x", "url": "http://x", "digest": "sha256:" + hashOf(label) + hashOf(label)[:24],
	}})
}

type layerSpec struct {
	name, source string
	deps         []string
	suspend      bool
	ready        map[string]any // the Ready condition; nil: none
	applied      string         // label of lastAppliedRevision
	attempted    string
}

func (w *world) layer(l layerSpec) {
	var deps []any
	for _, d := range l.deps {
		deps = append(deps, map[string]any{"name": d})
	}
	spec := map[string]any{
		"interval": "1m", "path": "./" + l.name, "prune": true, "suspend": l.suspend,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": l.source},
	}
	if deps != nil {
		spec["dependsOn"] = deps
	}
	status := map[string]any{"observedGeneration": int64(0)}
	if l.applied != "" {
		status["lastAppliedRevision"] = revOf(l.applied)
	}
	if l.attempted != "" {
		status["lastAttemptedRevision"] = revOf(l.attempted)
	}
	if l.ready != nil {
		status["conditions"] = []any{l.ready}
	}
	w.create(ksGVR, map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": l.name}, "spec": spec,
	}, status)
}

func (w *world) ready(status, reason, msg string, ago time.Duration) map[string]any {
	return map[string]any{
		"type": "Ready", "status": status, "reason": reason, "message": msg,
		"lastTransitionTime": w.now.Add(-ago).Format(time.RFC3339),
	}
}

// run starts an engine and a reader on namespace ns and returns the
// engine once the reader's caches synced.
func run(t *testing.T, c *clustertest.Cluster, ns string, engineNow time.Time, mailTo ...string) *rollouttest.Engine {
	t.Helper()
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: mailTo, DefaultCluster: "prod"}
	te := rollouttest.Start(t, t.TempDir(), cfg, func() time.Time { return engineNow }, true)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := cluster.New(dc, te, cluster.Config{Cluster: "prod", Namespaces: []string{ns}}, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	if err := r.CheckAccess(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reader: %v", err)
		}
	})
	waitFor(t, "caches to sync", r.Synced)
	return te
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verdict waits until the rollout of label has the wanted verdict.
func verdict(t *testing.T, te *rollouttest.Engine, label string, want rollout.Verdict) *rollout.View {
	t.Helper()
	var v *rollout.View
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, _ = te.Lookup(rollout.Query{Cluster: "prod", Hash: hashOf(label)})
		if v != nil && v.Verdict == want {
			return v
		}
		if time.Now().After(deadline) {
			if v == nil {
				t.Fatalf("%s: never seen, want %s", label, want)
			}
			t.Fatalf("%s: verdict %s (%s), want %s", label, v.Verdict, v.Summary, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func layerNames(v *rollout.View) []string {
	var out []string
	for _, l := range v.Layers {
		out = append(out, l.Name)
	}
	return out
}

// TestReaderScenarios runs against a real kube-apiserver, one namespace a
// scenario, with no webhook at all: cluster state alone must give the
// verdict.
func TestReaderScenarios(t *testing.T) {
	c := clustertest.Start(t)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	applied := func(w *world, label string, ago time.Duration) map[string]any {
		return w.ready("True", "ReconciliationSucceeded", "Applied revision: "+revOf(label), ago)
	}
	newWorld := func(t *testing.T, ns string) *world {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return &world{t: t, dc: dc, ns: ns, now: now}
	}

	t.Run("catch-up of a clean three-layer rollout", func(t *testing.T) {
		w := newWorld(t, "clean")
		w.source("fleet", "R1")
		w.layer(layerSpec{name: "infra", source: "fleet", applied: "R1", attempted: "R1", ready: applied(w, "R1", 9*time.Minute)})
		w.layer(layerSpec{name: "platform", source: "fleet", deps: []string{"infra"}, applied: "R1", attempted: "R1", ready: applied(w, "R1", 8*time.Minute)})
		w.layer(layerSpec{name: "apps", source: "fleet", deps: []string{"platform"}, applied: "R1", attempted: "R1", ready: applied(w, "R1", 7*time.Minute)})
		te := run(t, c, w.ns, now)
		v := verdict(t, te, "R1", rollout.VerdictApplied)
		if v.ExpectedFrom != "cluster" || !slices.Equal(layerNames(v), []string{"clean/apps", "clean/infra", "clean/platform"}) {
			t.Fatalf("from %s, layers %v", v.ExpectedFrom, layerNames(v))
		}
		if v.CompletedAt == nil || !v.CompletedAt.Equal(now.Add(-7*time.Minute)) {
			t.Fatalf("completed at %v, want the Ready transition of the last layer", v.CompletedAt)
		}
	})

	t.Run("a prune failure known only from status", func(t *testing.T) {
		w := newWorld(t, "prune")
		w.source("fleet", "R2")
		w.layer(layerSpec{name: "infra", source: "fleet", applied: "R2", attempted: "R2", ready: applied(w, "R2", 9*time.Minute)})
		w.layer(layerSpec{name: "apps", source: "fleet", deps: []string{"infra"}, applied: "R1", attempted: "R2",
			ready: w.ready("False", "PruneFailed", `delete failed, errors: ConfigMap/prune/app-protected delete failed: configmaps "app-protected" is forbidden: denied;`, 8*time.Minute)})
		te := run(t, c, w.ns, now)
		v := verdict(t, te, "R2", rollout.VerdictFailed)
		if len(v.Failures) != 1 || len(v.Failures[0].Objects) != 1 || v.Failures[0].Objects[0].Name != "app-protected" {
			t.Fatalf("failures %+v", v.Failures)
		}
	})

	t.Run("a suspended layer and a layer on another source are not expected", func(t *testing.T) {
		w := newWorld(t, "suspended")
		w.source("fleet", "R8")
		w.source("other", "Q1")
		w.layer(layerSpec{name: "infra", source: "fleet", applied: "R8", attempted: "R8", ready: applied(w, "R8", 9*time.Minute)})
		w.layer(layerSpec{name: "platform", source: "fleet", deps: []string{"infra"}, applied: "R8", attempted: "R8", ready: applied(w, "R8", 8*time.Minute)})
		w.layer(layerSpec{name: "apps", source: "fleet", deps: []string{"platform"}, suspend: true, applied: "R7", attempted: "R7", ready: applied(w, "R7", time.Hour)})
		w.layer(layerSpec{name: "tenant", source: "other", applied: "Q1", attempted: "Q1", ready: applied(w, "Q1", time.Hour)})
		te := run(t, c, w.ns, now)
		v := verdict(t, te, "R8", rollout.VerdictApplied)
		if !slices.Equal(layerNames(v), []string{"suspended/infra", "suspended/platform"}) {
			t.Fatalf("layers %v", layerNames(v))
		}
	})

	t.Run("stuck names the root cause two tiers up", func(t *testing.T) {
		w := newWorld(t, "stuck")
		w.source("fleet", "R3")
		w.layer(layerSpec{name: "infra", source: "fleet", applied: "R3", attempted: "R3", ready: applied(w, "R3", 9*time.Minute)})
		w.layer(layerSpec{name: "platform", source: "fleet", deps: []string{"infra"}, applied: "R2", attempted: "R2"})
		w.layer(layerSpec{name: "apps", source: "fleet", deps: []string{"platform"}, applied: "R2", attempted: "R3",
			ready: w.ready("Unknown", "Progressing", "Reconciliation in progress", 8*time.Minute)})
		w.layer(layerSpec{name: "edge", source: "fleet", deps: []string{"apps"}, applied: "R2", attempted: "R2",
			ready: w.ready("False", "DependencyNotReady", "Dependencies do not meet ready condition", 8*time.Minute)})
		te := run(t, c, w.ns, now.Add(time.Hour))
		v := verdict(t, te, "R3", rollout.VerdictStuck)
		if v.RootCause != "stuck/platform" {
			t.Fatalf("root cause %q, want stuck/platform", v.RootCause)
		}
	})
}
