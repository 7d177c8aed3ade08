package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent/cloudeventtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
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
		if !strings.Contains(string(b), "\nfdn_flux_events_silent{cluster=\"default\"} 1\n") {
			t.Errorf("blind, but /metrics lacks fdn_flux_events_silent{cluster=\"default\"} 1")
		}
		checkMetricsDocumented(t, string(b))
	})
}

// registerCluster registers cluster name with a hub on c: a Secret in
// namespace labelled with it, kubeconfig its value.
func registerCluster(t testing.TB, c *clustertest.Cluster, namespace, name, kubeconfig string) {
	t.Helper()
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": name, "namespace": namespace, "labels": map[string]any{clusters.ClusterLabel: name}},
		"stringData": map[string]any{"value": kubeconfig},
	}}
	secrets := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(namespace)
	if _, err := secrets.Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bind grants user exactly cluster.Rules.
func bind(t testing.TB, c *clustertest.Cluster, user string) {
	t.Helper()
	c.Grant(t, user, cluster.Rules(), rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user})
}

// TestServeReadsRegisteredClusters: a hub reads, besides its own cluster,
// a cluster registered as a Secret of its namespace ($POD_NAMESPACE) on a
// second real kube-apiserver, as it reads its own: a rollout there is
// answered from that cluster's state under the Secret's name, with no
// webhook. A cluster whose kubeconfig does not parse, and one whose user
// may read nothing, are each named on /readyz, which stays ready, without
// the Secrets' contents. Its verdict links the commit in the repository
// its own source names (the hub's source of that name names another). Its
// blindness is its own, and the last event kept of a cluster no longer
// registered is deleted. (Secrets added, rotated and removed:
// internal/clusters' test.)
func TestServeReadsRegisteredClusters(t *testing.T) {
	hubCluster, remote := clustertest.Start(t), clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	w := remote.NewWorld(t, "flux-system", now)
	rev := "main@sha1:5b1f2a6c0f5e7d9a3b4c2d1e0f9a8b7c6d5e4f3a"
	w.SourceAt("fleet", rev, "https://github.com/acme/fleet-eu.git")
	hubCluster.NewWorld(t, "flux-system", now).SourceAt("fleet", rev, "https://github.com/acme/hub.git")
	for _, l := range []string{"infra", "apps"} {
		w.Layer(clustertest.Layer{Name: l, Source: "fleet", Applied: rev, Attempted: rev,
			Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev, time.Minute)})
	}
	kubeconfig, err := os.ReadFile(remote.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hubCluster.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: fdn-hub}\n")
	nobody, err := os.ReadFile(remote.KubeconfigFor(t, "nobody"))
	if err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{
		"prod-eu": string(kubeconfig),
		"qa":      "clusters: [" + secretInKubeconfig,
		"dev":     string(nobody),
	} {
		registerCluster(t, hubCluster, "fdn-hub", name, value)
	}
	hook := cloudeventtest.New([]byte("hook-key"), time.Now)
	defer hook.Close()
	// A cluster whose Secret went while the service was down left its last
	// event, deleted once the registry has read every Secret; prod-eu's
	// stays. Checked once the service has stopped (cleanups run last
	// first).
	dataDir := t.TempDir()
	db, err := store.Open(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetLastEvents(map[string]time.Time{"decommissioned": now, "prod-eu": now}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	t.Cleanup(func() {
		db, err := store.Open(dataDir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for cluster, kept := range map[string]bool{"decommissioned": false, "prod-eu": true} {
			if at, err := db.LastEvent(cluster); err != nil || at.IsZero() == kept {
				t.Errorf("%s's last event %v (%v), want kept %v", cluster, at, err, kept)
			}
		}
	})
	url := startServe(t, map[string]string{"POD_NAMESPACE": "fdn-hub"}, "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--data-dir", dataDir, "--kubeconfig", hubCluster.Kubeconfig, "--default-cluster", "hub", "--blind-after", "5s",
		"--webhook-url", hook.URL, "--webhook-secret-file", secretFiles(t)("hook", "hook-key"))
	verdict := func() (v struct {
		Verdict      string `json:"verdict"`
		Cluster      string `json:"cluster"`
		ExpectedFrom string `json:"expected_from"`
	}) {
		resp, err := http.Get(url + "/verdict?cluster=prod-eu&rev=" + rev[len("main@sha1:"):])
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return v
	}
	deadline := time.Now().Add(30 * time.Second)
	for v := verdict(); v.Verdict != "applied" || v.Cluster != "prod-eu" || v.ExpectedFrom != "cluster"; v = verdict() {
		if time.Now().After(deadline) {
			t.Fatalf("the registered cluster's rollout: %+v, want applied on prod-eu, expected from the cluster", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its verdict links the commit where prod-eu's own source says.
	commitURL := "https://github.com/acme/fleet-eu/commit/" + rev[len("main@sha1:"):]
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var got []string
		for _, e := range hook.Events() {
			var d cloudevent.Data
			if err := e.DataAs(&d); err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Cluster+" "+d.Verdict+" "+d.CommitURL)
		}
		if slices.Contains(got, "prod-eu applied "+commitURL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verdicts delivered %q, want prod-eu's applied linking %s", got, commitURL)
		}
	}
	named := func(_ int, warnings []string) bool {
		all := strings.Join(warnings, "\n")
		return strings.Contains(all, "cluster qa (Secret fdn-hub/qa) is not read: the kubeconfig does not parse") &&
			strings.Contains(all, "cluster dev (Secret fdn-hub/dev) is not read, tried again") && strings.Contains(all, "forbidden")
	}
	status, warnings := awaitReadyz(t, url, "qa and dev named", named)
	if all := strings.Join(warnings, "\n"); status != 200 || strings.Contains(all, "cluster prod-eu (Secret") || strings.Contains(all, secretInKubeconfig) {
		t.Fatalf("readyz %d, warnings %s: want ready, prod-eu read, no Secret's contents", status, all)
	}
	// Each cluster's state on /metrics: read, or not.
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`fdn_cluster_up{cluster="hub"} 1`, `fdn_cluster_up{cluster="prod-eu"} 1`,
		`fdn_cluster_up{cluster="qa"} 0`, `fdn_cluster_up{cluster="dev"} 0`, `fdn_cluster_sync_seconds{cluster="prod-eu"} `} {
		if !strings.Contains(string(b), "\n"+want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(b), `fdn_cluster_sync_seconds{cluster="dev"}`) {
		t.Error("a cluster never read has a sync time")
	}

	// The list page names each cluster and its state, no Secret's contents.
	resp, err = http.Get(url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`<a href="/ui/?cluster=hub">hub</a>`, `<a href="/ui/?cluster=prod-eu">prod-eu</a>`,
		`class="badge cluster-read">read</span></td>
<td>2</td>`, "Secret fdn-hub/prod-eu", "the kubeconfig does not parse", "Secret fdn-hub/dev"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the list page does not show %q", want)
		}
	}
	if n := strings.Count(string(page), `class="badge cluster-not-read">not read</span>`); n != 2 || strings.Contains(string(page), secretInKubeconfig) {
		t.Errorf("the list page shows %d clusters not read (want qa and dev), or a Secret's contents", n)
	}

	// Blindness is each cluster's own: prod-eu's layers exist and no event
	// came from its notification-controller, so it is named (not the
	// hub's own cluster, which has no layers), its gauge labelled with it,
	// the service still ready. One event naming it ends that.
	blind := "cluster prod-eu: no event from notification-controller"
	status, warnings = awaitReadyz(t, url, "prod-eu blind", func(_ int, w []string) bool { return strings.Contains(strings.Join(w, "\n"), blind) })
	if all := strings.Join(warnings, "\n"); status != 200 || strings.Contains(all, "cluster hub:") {
		t.Fatalf("readyz %d, warnings %s: want ready, the hub's own cluster not blind", status, all)
	}
	if v := metric(t, url, `fdn_flux_events_silent{cluster="prod-eu"}`); v != "1" {
		t.Errorf(`fdn_flux_events_silent{cluster="prod-eu"} %q, want 1`, v)
	}
	if v := metric(t, url, `fdn_flux_events_silent{cluster="hub"}`); v != "0" {
		t.Errorf(`fdn_flux_events_silent{cluster="hub"} %q, want 0`, v)
	}
	event, _ := json.Marshal(deployed("prod-eu", rev, now, "ReconciliationSucceeded")[0])
	resp, err = http.Post(url+"/webhook", "application/json", bytes.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("event from prod-eu: %d", resp.StatusCode)
	}
	awaitReadyz(t, url, "prod-eu heard from again", func(_ int, w []string) bool { return !strings.Contains(strings.Join(w, "\n"), blind) })
}

const secretInKubeconfig = "s3cr3t-in-a-kubeconfig"
