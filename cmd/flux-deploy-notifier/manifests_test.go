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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
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

// TestManifestsGrantExactlyTheReaderRules: the ClusterRole is least privilege.
func TestManifestsGrantExactlyTheReaderRules(t *testing.T) {
	for _, u := range kustomize(t, manifestsDir) {
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
