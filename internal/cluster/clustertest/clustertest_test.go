package clustertest_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// TestRealAPIServer: the harness serves the Flux CRDs, and status is
// written through its own subresource, as kustomize-controller does.
func TestRealAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	ks := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "apps", "namespace": "default"},
		"spec": map[string]any{
			"interval": "1m", "path": "./apps", "prune": true,
			"sourceRef": map[string]any{"kind": "GitRepository", "name": "fleet"},
		},
	}}
	ctx := context.Background()
	got, err := dc.Resource(gvr).Namespace("default").Create(ctx, ks, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Kustomization: %v", err)
	}
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	_ = unstructured.SetNestedField(got.Object, rev, "status", "lastAppliedRevision")
	if _, err := dc.Resource(gvr).Namespace("default").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	back, err := dc.Resource(gvr).Namespace("default").Get(ctx, "apps", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(back.Object, "status", "lastAppliedRevision"); v != rev {
		t.Fatalf("status.lastAppliedRevision %q", v)
	}
}
