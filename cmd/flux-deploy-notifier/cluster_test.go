package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// TestServeReadsTheClusterWithLeastPrivilege: serve with a user bound to
// cluster.Rules alone reads the cluster, turns ready only once its caches
// synced, and answers a verdict from cluster state with no webhook; a user
// without them is refused at start, with a clear error.
func TestServeReadsTheClusterWithLeastPrivilege(t *testing.T) {
	c := clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	w := c.NewWorld(t, "flux-system", now)
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	w.Source("fleet", rev)
	for _, l := range []string{"infra", "apps"} {
		w.Layer(clustertest.Layer{Name: l, Source: "fleet", Applied: rev, Attempted: rev,
			Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev, time.Minute)})
	}

	t.Run("no permission: refused at start", func(t *testing.T) {
		err := run(context.Background(), []string{"serve", "--insecure-no-auth", "--listen", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--kubeconfig", c.KubeconfigFor(t, "nobody")},
			func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("err %v, want a clear forbidden error", err)
		}
	})

	t.Run("exactly the reader's rules", func(t *testing.T) {
		bind(t, c, "fdn-reader")
		url := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--kubeconfig", c.KubeconfigFor(t, "fdn-reader"), "--blind-after", "2s")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var v struct {
				Verdict      string `json:"verdict"`
				ExpectedFrom string `json:"expected_from"`
			}
			resp, err := http.Get(url + "/verdict?rev=" + rev[len("main@sha1:"):])
			if err != nil {
				t.Fatal(err)
			}
			_ = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if v.Verdict == "applied" && v.ExpectedFrom == "cluster" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("verdict %+v", v)
			}
			time.Sleep(20 * time.Millisecond)
		}
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var ready struct {
			Checks map[string]string `json:"checks"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ready)
		resp.Body.Close()
		if resp.StatusCode != 200 || ready.Checks["cluster"] != "ok" {
			t.Fatalf("readyz %d %v", resp.StatusCode, ready.Checks)
		}

		// Layers exist and no event came: the service says it is blind,
		// in /rollouts and /readyz, without turning unready.
		deadline = time.Now().Add(30 * time.Second)
		for {
			var body struct {
				Warnings []string `json:"warnings"`
			}
			resp, err := http.Get(url + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if len(body.Warnings) == 1 && strings.Contains(body.Warnings[0], "no event from notification-controller") {
				if resp.StatusCode != 200 {
					t.Fatalf("blindness made the service unready: %d", resp.StatusCode)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no blindness warning: %v", body.Warnings)
			}
			time.Sleep(50 * time.Millisecond)
		}

		// The alert rules read only metrics this service exposes: a name
		// misspelt there would be an alert that never fires. Blind, the
		// gauge its alert reads is 1.
		resp, err = http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		exposed := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
				name, _, _ = strings.Cut(name, "{")
				exposed[name] = true
			}
		}
		names := alertMetrics(t)
		if len(names) < 6 {
			t.Fatalf("the alert rules read %v: fewer than the six they have", names)
		}
		for _, name := range names {
			if !exposed[name] {
				t.Errorf("the alert rules read %s, which /metrics lacks", name)
			}
		}
		if !strings.Contains(string(b), "\nfdn_flux_events_silent 1\n") {
			t.Errorf("blind, but /metrics lacks fdn_flux_events_silent 1")
		}
		checkMetricsDocumented(t, string(b))
	})
}

// bind grants user exactly cluster.Rules.
func bind(t testing.TB, c *clustertest.Cluster, user string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: cluster.Rules(),
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	for res, obj := range map[string]any{"clusterroles": role, "clusterrolebindings": binding} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: res}
		if _, err := dc.Resource(gvr).Create(context.Background(), &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
