package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

const manifestsDir = "../../manifests"

// manifestDocs reads the objects of the files a kustomization lists.
func manifestDocs(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	var k struct{ Resources []string }
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			out = append(out, manifestDocs(t, path)...)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := clustertest.ParseYAML(b)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, objs...)
	}
	return out
}

// TestManifestsMatchTheCommand: manifests/flux.yaml is what the manifests
// command prints from notification-controller's API types.
func TestManifestsMatchTheCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"manifests", "--cluster", "prod"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(manifestsDir, "flux.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("manifests/flux.yaml differs from `flux-deploy-notifier manifests --cluster prod`:\n%s", out.String())
	}
}

// TestManifestsGrantExactlyTheReaderRules: the ClusterRole is least privilege.
func TestManifestsGrantExactlyTheReaderRules(t *testing.T) {
	for _, u := range manifestDocs(t, manifestsDir) {
		if u.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		b, _ := yaml.Marshal(u.Object)
		if err := yaml.Unmarshal(b, &role); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(role.Rules, cluster.Rules()) {
			t.Fatalf("ClusterRole rules %+v, want %+v", role.Rules, cluster.Rules())
		}
		return
	}
	t.Fatal("no ClusterRole in manifests/")
}

// TestManifestsApplyToRealAPIServer applies manifests/ (and the tenant
// example) with server-side dry-run to a real kube-apiserver with the Flux
// CRDs installed: every object must be valid as written.
func TestManifestsApplyToRealAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	docs := manifestDocs(t, manifestsDir)
	docs = append(docs, manifestDocs(t, filepath.Join(manifestsDir, "examples", "tenant"))...)
	// Namespaces for real, so that the objects in them can be tried.
	for _, ns := range []string{"flux-system", "flux-deploy-notifier", "team-a"} {
		c.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n")
	}
	ctx := context.Background()
	seen := map[string]bool{}
	for _, u := range docs {
		id := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if seen[id] || u.GetKind() == "Namespace" {
			continue
		}
		seen[id] = true
		if err := c.ServerSideApply(ctx, u, "manifests-check", true); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("only %d objects checked", len(seen))
	}
}
