package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// applier maps kinds to resources through discovery, once per cluster.
type applier struct {
	once   sync.Once
	err    error
	dc     dynamic.Interface
	mapper meta.RESTMapper
}

func (c *Cluster) applier() (*applier, error) {
	a := &c.apply
	a.once.Do(func() {
		disco, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			a.err = err
			return
		}
		a.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
		a.dc, a.err = dynamic.NewForConfig(c.Config)
	})
	return a, a.err
}

// Resource is the client of u's kind, in u's namespace when it has one.
func (c *Cluster) Resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	a, err := c.applier()
	if err != nil {
		return nil, err
	}
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dc.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return a.dc.Resource(m.Resource), nil
}

// ResourceFor is the client of a kind, in namespace when it is namespaced.
func (c *Cluster) ResourceFor(apiVersion, kind, namespace string) (dynamic.ResourceInterface, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	return c.Resource(u)
}

// ServerSideApply applies u as the administrator, with field manager
// manager; dryRun only validates it.
func (c *Cluster) ServerSideApply(ctx context.Context, u *unstructured.Unstructured, manager string, dryRun bool) error {
	ri, err := c.Resource(u)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: manager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, u.GetName(), u, opts)
	return err
}

// ApplyYAML server-side applies every object of a multi-document YAML, in
// order.
func (c *Cluster) ApplyYAML(t testing.TB, docs string) {
	t.Helper()
	objs, err := ParseYAML([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if err := c.ServerSideApply(context.Background(), u, "e2e", false); err != nil {
			t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

// ParseYAML splits a multi-document YAML into objects, skipping empty ones.
func ParseYAML(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, doc := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}
