package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
)

const manifestsDir = "../../manifests"

// kustomize builds dir as `kubectl apply -k` would, with the kustomize
// make testbin builds, and returns its objects.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(clustertest.Binary(t, "kustomize"), "build", dir).Output()
	if err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			t.Fatalf("kustomize build %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kustomize build %s: %v (run `make testbin`)", dir, err)
	}
	objs, err := clustertest.ParseYAML(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return objs
}

// withComponents builds manifests/ with both optional components, as an
// overlay of the user's would.
func withComponents(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return overlay(t, "components/servicemonitor", "components/prometheusrule")
}

// overlay is manifests/ with components (paths under manifests/), as an
// overlay of a user's builds it.
func overlay(t *testing.T, components ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes no absolute path.
	base, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range components {
		paths = append(paths, base+"/"+c)
	}
	k := "resources: [" + base + "]\ncomponents: [" + strings.Join(paths, ", ") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, dir)
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

// TestManifestsNameTheReleaseNamespaces: an Alert has no namespace
// wildcard, so it sends the HelmReleases of each namespace named, the flux
// namespace's by default, as notification-controller's types say.
func TestManifestsNameTheReleaseNamespaces(t *testing.T) {
	sources := func(args ...string) []string {
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"manifests", "--flux-namespace", "fleet"}, args...), func(string) string { return "" }, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		objs, err := clustertest.ParseYAML(out.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range objs {
			if o.GetKind() != "Alert" {
				continue
			}
			refs, _, _ := unstructured.NestedSlice(o.Object, "spec", "eventSources")
			for _, r := range refs {
				m := r.(map[string]any)
				ns, _ := m["namespace"].(string)
				got = append(got, m["kind"].(string)+" "+ns)
			}
		}
		return got
	}
	// Every source kind, Bucket included.
	if got := sources(); !slices.Equal(got, []string{"Kustomization ", "GitRepository ", "OCIRepository ", "Bucket ", "HelmRelease "}) {
		t.Errorf("default event sources %q", got)
	}
	if got := sources("--helmrelease-namespaces", "apps, web,"); !slices.Equal(got[4:], []string{"HelmRelease apps", "HelmRelease web"}) {
		t.Errorf("event sources with two release namespaces %q", got)
	}
}

// TestManifestsGrantExactlyTheReaderRules: the ClusterRole is least
// privilege, and so is the Role on the service's namespace: what reading
// the clusters registered as Secrets needs.
func TestManifestsGrantExactlyTheReaderRules(t *testing.T) {
	objs := kustomize(t, manifestsDir)
	for _, tc := range []struct {
		kind, name string
		want       []rbacv1.PolicyRule
	}{
		{"ClusterRole", "flux-deploy-notifier", cluster.Rules()},
		{"Role", "flux-deploy-notifier-clusters", clusters.Rules()},
	} {
		i := slices.IndexFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == tc.kind && u.GetName() == tc.name })
		if i < 0 {
			t.Errorf("no %s %s in manifests/", tc.kind, tc.name)
			continue
		}
		var role struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		b, _ := yaml.Marshal(objs[i].Object)
		if err := yaml.Unmarshal(b, &role); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(role.Rules, tc.want) {
			t.Errorf("%s %s rules %+v, want %+v", tc.kind, tc.name, role.Rules, tc.want)
		}
	}
}

// TestManifestsApplyToRealAPIServer applies manifests/, the tenant example
// and the optional components with server-side dry-run to a real
// kube-apiserver with the Flux and the Prometheus Operator's CRDs
// installed: every object must be valid as written.
func TestManifestsApplyToRealAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	c.InstallCRDs(t, "crds/monitoring") // the optional components' ServiceMonitor and PrometheusRule
	docs := append(withComponents(t), kustomize(t, filepath.Join(manifestsDir, "examples", "tenant"))...)
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
	if len(seen) < 17 {
		t.Fatalf("only %d objects checked", len(seen))
	}
}

// alertRules is the spec of the PrometheusRule of
// components/prometheusrule, as YAML: Prometheus's own rule file format.
func alertRules(t *testing.T) []byte {
	t.Helper()
	for _, u := range withComponents(t) {
		if spec, ok := u.Object["spec"].(map[string]any); ok && u.GetKind() == "PrometheusRule" {
			b, err := yaml.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatal("no PrometheusRule with a spec in manifests/ with its components")
	return nil
}

// alertExprs maps each alert of rules to its expression.
func alertExprs(t *testing.T, rules []byte) map[string]string {
	t.Helper()
	var spec struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(rules, &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// alertMetrics is every metric of the service the alerts read.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	metric := regexp.MustCompile(`\bfdn_[a-z_]+`)
	var names []string
	for _, expr := range alertExprs(t, alertRules(t)) {
		names = append(names, metric.FindAllString(expr, -1)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestAlertRules runs promtool's unit tests of the alert rules
// (testdata/alerts-test.yaml) on the PrometheusRule's groups, and requires
// of them a case where each alert fires and one where it does not.
func TestAlertRules(t *testing.T) {
	promtool := clustertest.Binary(t, "promtool")
	dir := t.TempDir()
	rules := alertRules(t)
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts-test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var spec struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(tests, &spec); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, g := range spec.Tests {
		for _, a := range g.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	exprs := alertExprs(t, rules)
	if len(exprs) < 7 {
		t.Fatalf("%d alerts, want 7 or more", len(exprs))
	}
	for name := range exprs {
		if !fires[name] || !quiet[name] {
			t.Errorf("alert %s: tested firing %v, tested quiet %v; want both", name, fires[name], quiet[name])
		}
	}
}

// TestManifestsRegisterAClusterWithAHub: what `manifests --reader` prints
// applies to a real kube-apiserver, and grants its ServiceAccount the
// reader's rules alone; `manifests --register`, given a token of it, prints
// a Secret the hub's registry reads, whose kubeconfig reads the cluster
// with exactly those rules (the service's own check of them passes).
func TestManifestsRegisterAClusterWithAHub(t *testing.T) {
	c := clustertest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"manifests", "--reader", "--namespace", "fdn-remote", "--cluster", "prod-eu",
		"--url", "https://hub.example.com/webhook"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	c.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: flux-system}\n")
	c.ApplyYAML(t, out.String())
	objs, err := clustertest.ParseYAML(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()+"/"+o.GetName()] = true
	}
	for _, want := range []string{"ServiceAccount/flux-deploy-notifier-reader", "ClusterRole/flux-deploy-notifier-reader",
		"ClusterRoleBinding/flux-deploy-notifier-reader", "Secret/flux-deploy-notifier-reader", "Alert/flux-deploy-notifier"} {
		if !kinds[want] {
			t.Errorf("manifests --reader prints no %s: %v", want, kinds)
		}
	}

	// kube-controller-manager, which fills the token Secret, does not run
	// here: a token of the same ServiceAccount from the TokenRequest API.
	dyn := dynamic.NewForConfigOrDie(c.Config)
	tr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]any{"name": readerName}, // the ServiceAccount's
		"spec":     map[string]any{"expirationSeconds": int64(3600)}}}
	got, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace("fdn-remote").
		Create(context.Background(), tr, metav1.CreateOptions{}, "token")
	if err != nil {
		t.Fatal(err)
	}
	token, _, _ := unstructured.NestedString(got.Object, "status", "token")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"manifests", "--register", "prod-eu", "--environment", "prod", "--namespace", "fdn",
		"--server", c.Config.Host, "--token-file", tokenFile, "--ca-file", filepath.Join(c.Dir, "apiserver-certs", "apiserver.crt")},
		func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	objs, err = clustertest.ParseYAML(out.Bytes())
	if err != nil || len(objs) != 1 || objs[0].GetKind() != "Secret" {
		t.Fatalf("manifests --register: %v, %v", objs, err)
	}
	secret := objs[0]
	if l := secret.GetLabels(); l[clusters.ClusterLabel] != "prod-eu" || l[clusters.EnvironmentLabel] != "prod" || secret.GetNamespace() != "fdn" {
		t.Fatalf("the registering Secret: labels %v in %q", l, secret.GetNamespace())
	}
	value, _, _ := unstructured.NestedString(secret.Object, "stringData", "value")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	// The service reads the cluster with it, the reader's rules checked
	// at start (a missing one refuses it, TestServeReadsTheClusterWithLeastPrivilege),
	// and the certificate authority checked: no insecure-skip-tls-verify.
	if strings.Contains(value, "insecure") {
		t.Fatalf("the kubeconfig skips TLS verification:\n%s", value)
	}
	startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--kubeconfig", kubeconfig,
		"--default-cluster", "prod-eu")
}
