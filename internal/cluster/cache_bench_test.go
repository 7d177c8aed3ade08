package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// counting takes every batch and counts the observations.
type counting struct{ n atomic.Int64 }

func (c *counting) SubmitAll(_ context.Context, obs []rollout.Observation) error {
	c.n.Add(int64(len(obs)))
	return nil
}

// BenchmarkReaderHeap reports the heap a running reader holds per layer
// once it has looked at them all: 1,000 Kustomizations on a real kube-apiserver,
// each with 100 objects in its inventory and a status as
// kustomize-controller writes it, on 10 GitRepositories.
func BenchmarkReaderHeap(b *testing.B) {
	const layers, sources, objects = 1000, 10, 100
	c := clustertest.Start(b)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const ns = "fleet"
	if _, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	at := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	create := func(kind string, obj, status map[string]any) {
		res := dc.Resource(cluster.Resource(kind)).Namespace(ns)
		got, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		got.Object["status"] = status
		if _, err := res.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range sources {
		create(flux.KindGitRepository, map[string]any{
			"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": flux.KindGitRepository,
			"metadata": map[string]any{"name": fmt.Sprintf("src-%d", i)},
			"spec":     map[string]any{"interval": "1m", "url": "https://example.com/fleet.git"},
		}, map[string]any{"artifact": map[string]any{"revision": rev, "lastUpdateTime": at, "path": "x", "url": "http://x",
			"digest": "sha256:9f8e4c6b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f"}})
	}
	for i := range layers {
		entries := make([]any, objects)
		for j := range entries {
			entries[j] = map[string]any{"id": fmt.Sprintf("apps-%d_web-%d_apps_Deployment", i, j), "v": "v1"}
		}
		history := make([]any, 5)
		for j := range history {
			history[j] = map[string]any{"digest": fmt.Sprintf("sha256:%064d", j), "firstReconciled": at, "lastReconciled": at,
				"lastReconciledDuration": "2.1s", "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": int64(3),
				"metadata": map[string]any{"revision": rev}}
		}
		create(flux.KindKustomization, map[string]any{
			"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": flux.KindKustomization,
			"metadata": map[string]any{"name": fmt.Sprintf("layer-%d", i)},
			"spec": map[string]any{"interval": "10m", "path": "./apps", "prune": true, "wait": true,
				"sourceRef": map[string]any{"kind": flux.KindGitRepository, "name": fmt.Sprintf("src-%d", i%sources)},
				"dependsOn": []any{map[string]any{"name": fmt.Sprintf("layer-%d", max(i-1, 0))}}},
		}, map[string]any{
			"observedGeneration": int64(1), "lastAppliedRevision": rev, "lastAttemptedRevision": rev, "lastHandledReconcileAt": at,
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: " + rev, "lastTransitionTime": at},
				map[string]any{"type": "Healthy", "status": "True", "reason": "Succeeded", "message": "Health check passed in 2.1s", "lastTransitionTime": at},
			},
			"history": history, "inventory": map[string]any{"entries": entries},
		})
	}
	var perLayer float64
	for b.Loop() {
		before := cluster.LiveHeap()
		sub := &counting{}
		r := cluster.New(dc, sub, cluster.Config{Cluster: "prod", Namespaces: []string{ns}}, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		// Measured once the reader has looked at every layer (a membership
		// mark and a status each at least) and stopped submitting: what it
		// holds for good, not the batches in flight.
		deadline := time.Now().Add(2 * time.Minute)
		for last := int64(-1); !r.Synced() || r.Layers() != layers || sub.n.Load() < 2*layers || sub.n.Load() != last; {
			if time.Now().After(deadline) {
				b.Fatalf("the reader did not look at %d layers in time (%d observations)", layers, sub.n.Load())
			}
			last = sub.n.Load()
			time.Sleep(250 * time.Millisecond)
		}
		// The first look only: a reader stopped lets go of its caches
		// when its informers' goroutines end, which may be after the
		// next one took its baseline.
		if perLayer == 0 {
			perLayer = float64(cluster.LiveHeap()-before) / layers
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perLayer, "heap-B/layer")
}
