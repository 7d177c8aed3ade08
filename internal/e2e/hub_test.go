//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// hub: one instance (the hub) reads its own cluster ("one", where the
// scenario's Alert sends its events) and a second real cluster ("two":
// its own etcd, kube-apiserver and Flux controllers) registered as a
// Secret that `manifests --register` prints, with a ServiceAccount's token
// allowed to read the scenario's namespace alone. Cluster two has no
// Alert: every event of its rollouts is lost. The same commits roll out on
// both, a clean one, a failing one and its fix, and each verdict on two,
// from its state alone, equals the verdict on one. Then cluster two's
// faults are its own, each named on /readyz and the list page while one
// goes on: its RoleBinding removed (forbidden, within a minute) and put
// back, its API server stopped for a minute and started again, its Secret
// deleted and added again; after each, two catches up with what it applied meanwhile.
// Two's silence is reported as its own blindness, mailed once.
func hubOfTwoClusters(t *testing.T, w *world) {
	two := clustertest.Start(t)
	StartFlux(t, two)
	two.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+w.ns+"}\n")
	rig2 := *w.rig
	rig2.c = two
	w2 := &world{rig: &rig2, ns: w.ns, repo: NewRepo(t, two, w.arts, w.ns, "fleet")}

	register, token := w.registration(t, two, "two", "prod", "fdn-reader")
	reader := rbacv1.Subject{Kind: "ServiceAccount", Name: "fdn-reader", Namespace: w.ns}

	// Both clusters have r0; the hub starts, two registered.
	publish := func(f files) Commit {
		c := w.repo.Publish(t, f)
		if c2 := w2.repo.Publish(t, f); c2 != c {
			t.Fatalf("cluster two's commit %s differs from one's %s", c2.Hash, c.Hash)
		}
		return c
	}
	r0 := publish(w.base("0"))
	w.c.ApplyYAML(t, register)
	w.svc = StartService(t, w.c, w.bin, w.ns, w.smtp.Addr, Options{Cluster: "one",
		Args: []string{"--cluster-secrets-namespace", w.ns, "--blind-after", "40s"}})
	for i := range tiers {
		w.applyTier(t, i, tier{})
		w2.applyTier(t, i, tier{})
	}
	w.awaitCluster(t, r0, tiers...)
	w2.awaitCluster(t, r0, tiers...)

	// The same rollouts, compared: two's verdicts from its state alone.
	// A layer that does not fail goes on after a failed verdict (those
	// behind the failure report DependencyNotReady when Flux next looks at
	// them), so the two are compared once each has said what it will.
	same := func(c Commit, want rollout.Verdict) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			v1 := w.svc.awaitTerminal(t, "one", c)
			v2 := w.svc.awaitTerminal(t, "two", c)
			if v1.Verdict != want || v2.Verdict != want {
				t.Fatalf("%s: %s on one, %s on two, want %s", c.Hash[:7], v1.Verdict, v2.Verdict, want)
			}
			if v1.ExpectedFrom == v2.ExpectedFrom && layerStates(v1) == layerStates(v2) && failures(v1) == failures(v2) {
				t.Logf("%s on both: %s %s %s", c.Hash[:7], v1.Verdict, layerStates(v1), failures(v1))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: one and two differ:\none: %s %s %s\ntwo: %s %s %s", c.Hash[:7],
					v1.Verdict, layerStates(v1), failures(v1), v2.Verdict, layerStates(v2), failures(v2))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	same(r0, rollout.VerdictApplied)
	r1 := publish(w.base("1"))
	same(r1, rollout.VerdictApplied)
	// infra cannot apply a ConfigMap in a namespace that does not exist.
	broken := w.base("2").with("infra/broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: broken, namespace: "+w.ns+"-nowhere}\ndata: {a: b}\n")
	r2 := publish(broken)
	same(r2, rollout.VerdictFailed)
	r3 := publish(w.base("3"))
	same(r3, rollout.VerdictApplied)

	// Two is silent (no Alert): its blindness is named, and mailed once.
	w.awaitReadyz(t, "two blind", func(warnings string) bool {
		return strings.Contains(warnings, "cluster two: no event from notification-controller") && !strings.Contains(warnings, "cluster one:")
	})
	w.awaitMailed(t, "no events from Flux on two since")

	// A permission withdrawn: named within a minute, one goes on; put
	// back, two catches up.
	two.RevokeIn(t, w.ns, "fdn-reader")
	w.awaitReadyz(t, "two forbidden", func(warnings string) bool {
		return strings.Contains(warnings, "cluster two: cluster access: list") && strings.Contains(warnings, "forbidden")
	})
	w.expectClusters(t, "two", "failing")
	r4 := publish(w.base("4"))
	w.svc.AwaitVerdictOn(t, "one", r4, rollout.VerdictApplied)
	w2.awaitCluster(t, r4, tiers...)
	two.GrantIn(t, w.ns, "fdn-reader", cluster.Rules(), reader)
	w.awaitReadyz(t, "two's access back", func(warnings string) bool { return !strings.Contains(warnings, "cluster access") })
	same(r4, rollout.VerdictApplied)

	// Its API server down for a minute: named all along, the hub ready,
	// one goes on; up again, two catches up.
	two.StopAPIServer()
	stopped := time.Now()
	unreachable := func(warnings string) bool {
		return strings.Contains(warnings, "cluster two: reading the cluster fails since")
	}
	w.awaitReadyz(t, "two unreachable", unreachable)
	w.expectClusters(t, "two", "failing")
	r5 := w.repo.Publish(t, w.base("5"))
	w.svc.AwaitVerdictOn(t, "one", r5, rollout.VerdictApplied)
	for time.Since(stopped) < time.Minute {
		if warnings := strings.Join(w.svc.warnings(t), "\n"); !unreachable(warnings) {
			t.Fatalf("%s after two's API server stopped, /readyz no longer names it: %s", time.Since(stopped), warnings)
		}
		time.Sleep(time.Second) // polling the minute out
	}
	two.StartAPIServer(t)
	if c2 := w2.repo.Publish(t, w.base("5")); c2 != r5 {
		t.Fatalf("cluster two's commit %s differs from one's %s", c2.Hash, r5.Hash)
	}
	w.awaitReadyz(t, "two reachable", func(warnings string) bool { return !strings.Contains(warnings, "reading the cluster fails") })
	same(r5, rollout.VerdictApplied)

	// Its Secret deleted: two is no longer read (its rollouts stay);
	// added again, it catches up.
	secrets, err := w.c.ResourceFor("v1", "Secret", w.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(context.Background(), "cluster-two", metav1.DeleteOptions{}); err != nil { // as manifests --register names it
		t.Fatal(err)
	}
	w.awaitPage(t, "two gone from the clusters", func(page string) bool { return !strings.Contains(page, `href="/ui/?cluster=two"`) })
	if v, err := w.svc.VerdictOn("two", r5.Hash); err != nil || v == nil || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("two's rollout once its Secret is gone: %v (%v), want it kept", v, err)
	}
	r6 := publish(w.base("6"))
	w2.awaitCluster(t, r6, tiers...)
	w.c.ApplyYAML(t, register)
	w.expectClusters(t, "two", "read")
	same(r6, rollout.VerdictApplied)

	// No Secret's contents anywhere the hub shows.
	page := w.page(t)
	if strings.Contains(page, token) || strings.Contains(strings.Join(w.svc.warnings(t), "\n"), token) {
		t.Fatal("the token reached the page or /readyz")
	}
}

// registration is the Secret `manifests --register` prints to register
// cluster c with the hub as name in environment env, and the token it
// holds: a ServiceAccount sa's, its rules bound in the scenario's
// namespace alone.
func (w *world) registration(t *testing.T, c *clustertest.Cluster, name, env, sa string) (secret, token string) {
	t.Helper()
	token = c.ServiceAccountToken(t, w.ns, sa)
	c.GrantIn(t, w.ns, sa, cluster.Rules(), rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: w.ns})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(w.bin, "manifests", "--register", name, "--environment", env, "--namespace", w.ns,
		"--server", c.Config.Host, "--token-file", tokenFile, "--ca-file", filepath.Join(c.Dir, "apiserver-certs", "apiserver.crt")).Output()
	if err != nil {
		t.Fatalf("manifests --register: %v", err)
	}
	return string(out), token
}

// awaitTerminal polls cluster's verdict on c until it is terminal.
func (s *Service) awaitTerminal(t *testing.T, cluster string, c Commit) *rollout.View {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := s.VerdictOn(cluster, c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil && v.Verdict.Terminal() && v.Verdict != rollout.VerdictUnknown {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: no verdict within 2m; last: %s", c.Hash[:7], cluster, dump(v))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// AwaitVerdictOn is AwaitVerdict on cluster.
func (s *Service) AwaitVerdictOn(t *testing.T, cluster string, c Commit, want rollout.Verdict) *rollout.View {
	t.Helper()
	v := s.awaitTerminal(t, cluster, c)
	if v.Verdict != want {
		t.Fatalf("%s on %s: %s, want %s\n%s", c.Hash[:7], cluster, v.Verdict, want, dump(v))
	}
	return v
}

// layerStates are a view's layers and their states, in order.
func layerStates(v *rollout.View) string {
	var out []string
	for _, l := range v.Layers.All() {
		out = append(out, l.Name+"="+string(l.State))
	}
	return strings.Join(out, " ")
}

// failures are a view's failures: layer and reason.
func failures(v *rollout.View) string {
	var out []string
	for _, f := range v.Failures {
		out = append(out, f.Layer+":"+f.Reason)
	}
	return strings.Join(out, " ")
}

// warnings are the hub's /readyz warnings; it must stay ready.
func (s *Service) warnings(t *testing.T) []string {
	t.Helper()
	status, warnings, err := loadkit.Readyz(http.DefaultClient, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK {
		t.Fatalf("/readyz %d: a cluster's fault made the hub unready (%q)", status, warnings)
	}
	return warnings
}

// awaitReadyz polls the hub's /readyz until ok accepts its warnings, for
// at most 90 s: a withdrawn permission is checked every 30 s.
func (w *world) awaitReadyz(t *testing.T, what string, ok func(warnings string) bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		warnings := strings.Join(w.svc.warnings(t), "\n")
		if ok(warnings) {
			t.Logf("/readyz: %s", what)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never showed %s: %s", what, warnings)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// page is the hub's list page.
func (w *world) page(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(w.svc.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// awaitPage polls the list page until ok accepts it.
func (w *world) awaitPage(t *testing.T, what string, ok func(page string) bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for page := w.page(t); !ok(page); page = w.page(t) {
		if time.Now().After(deadline) {
			t.Fatalf("the list page never showed %s", what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// expectClusters waits until the list page's table shows cluster in
// state, the hub's own cluster read all along.
func (w *world) expectClusters(t *testing.T, cluster, state string) {
	t.Helper()
	row := func(name, state string) string {
		return fmt.Sprintf("<td><a href=\"/ui/?cluster=%s\">%s</a></td>\n<td>%s</td>\n<td><span class=\"badge cluster-%s\">", name, name, map[string]string{"one": "", "two": "prod"}[name], state)
	}
	w.awaitPage(t, cluster+" "+state, func(page string) bool {
		return strings.Contains(page, row(cluster, state)) && strings.Contains(page, row("one", "read"))
	})
}

// awaitMailed waits until the hub mailed a mail whose label starts with
// prefix, and checks it mailed it once.
func (w *world) awaitMailed(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n := 0
		for _, m := range w.mails(w.svc) {
			if strings.HasPrefix(m, prefix) {
				n++
			}
		}
		switch {
		case n == 1:
			return
		case n > 1:
			t.Fatalf("%d mails %q, want one", n, prefix)
		case time.Now().After(deadline):
			t.Fatalf("no mail %q: %q", prefix, w.mails(w.svc))
		}
		time.Sleep(250 * time.Millisecond)
	}
}
