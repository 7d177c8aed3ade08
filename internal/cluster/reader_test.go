package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

var hashOf = enginetest.Hash

func revOf(label string) string { return "main@sha1:" + hashOf(label) }

// run starts an engine and a reader on namespace ns and returns the
// engine once the reader's caches synced.
func run(t *testing.T, c *clustertest.Cluster, ns string, engineNow time.Time, mailTo ...string) *enginetest.Engine {
	t.Helper()
	te := startEngine(t, t.TempDir(), engineNow, mailTo...)
	startReader(t, c, ns, te)
	return te
}

func startEngine(t *testing.T, dir string, now time.Time, mailTo ...string) *enginetest.Engine {
	t.Helper()
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: mailTo, DefaultCluster: "prod"}
	return enginetest.Start(t, dir, cfg, func() time.Time { return now }, true)
}

// startReader runs a reader until stop or the end of the test.
func startReader(t *testing.T, c *clustertest.Cluster, ns string, te *enginetest.Engine) (stop func()) {
	t.Helper()
	return startReaderOn(t, c, ns, te)
}

func startReaderOn(t *testing.T, c *clustertest.Cluster, ns string, te cluster.Submitter) (stop func()) {
	t.Helper()
	_, stop = startReaderWith(t, c, ns, te)
	return stop
}

// startReaderWith is startReaderOn, giving the reader too.
func startReaderWith(t *testing.T, c *clustertest.Cluster, ns string, te cluster.Submitter) (_ *cluster.Reader, stop func()) {
	t.Helper()
	r, err := cluster.NewForConfig(c.Config, te, cluster.Config{Cluster: "prod", Namespaces: []string{ns}}, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckAccess(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reader: %v", err)
		}
	}
	t.Cleanup(stop)
	waitFor(t, "caches to sync", r.Synced)
	return r, stop
}

// runReader checks r's access and runs it until the test ends.
func runReader(t *testing.T, r *cluster.Reader) {
	t.Helper()
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
func verdict(t *testing.T, te *enginetest.Engine, label string, want rollout.Verdict) *rollout.View {
	t.Helper()
	var v *rollout.View
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, _ = te.Lookup(engine.Query{Cluster: "prod", Hash: hashOf(label)})
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
	for _, l := range v.Layers.All() {
		out = append(out, l.Name)
	}
	return out
}

// refusing refuses, as the model refuses an invalid observation, every
// batch with an observation whose message holds marker, and counts them.
type refusing struct {
	cluster.Submitter
	marker string
	n      atomic.Int32
}

func (r *refusing) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	for _, o := range obs {
		if strings.Contains(o.Message, r.marker) {
			r.n.Add(1)
			return fmt.Errorf("%w: refused by the test", rollout.ErrInvalid)
		}
	}
	return r.Submitter.SubmitAll(ctx, obs)
}

// failingFirst fails the first n batches as a full disk would.
type failingFirst struct {
	cluster.Submitter
	n atomic.Int32
}

func (f *failingFirst) SubmitAll(ctx context.Context, obs []rollout.Observation) error {
	if f.n.Add(-1) >= 0 {
		return fmt.Errorf("%w: no space left on device", engine.ErrStore)
	}
	return f.Submitter.SubmitAll(ctx, obs)
}

// TestReaderScenarios runs against a real kube-apiserver, one namespace a
// scenario, with no webhook at all: cluster state alone must give the
// verdict.
func TestReaderScenarios(t *testing.T) {
	c := clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	applied := func(w *clustertest.World, label string, ago time.Duration) map[string]any {
		return w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+revOf(label), ago)
	}
	newWorld := func(t *testing.T, ns string) *clustertest.World { return c.NewWorld(t, ns, now) }

	t.Run("catch-up of a clean three-layer rollout", func(t *testing.T) {
		w := newWorld(t, "clean")
		w.Source("fleet", revOf("R1"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "platform", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 8*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"platform"}, Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 7*time.Minute)})
		te := run(t, c, w.Namespace(), now)
		v := verdict(t, te, "R1", rollout.VerdictApplied)
		if v.ExpectedFrom != "cluster" || !slices.Equal(layerNames(v), []string{"clean/apps", "clean/infra", "clean/platform"}) {
			t.Fatalf("from %s, layers %v", v.ExpectedFrom, layerNames(v))
		}
		if v.CompletedAt == nil || !v.CompletedAt.Equal(now.Add(-7*time.Minute)) {
			t.Fatalf("completed at %v, want the Ready transition of the last layer", v.CompletedAt)
		}
	})

	t.Run("observations the store refused are retried", func(t *testing.T) {
		w := newWorld(t, "retry")
		w.Source("fleet", revOf("R1"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 8*time.Minute)})
		te := startEngine(t, t.TempDir(), now)
		flaky := &failingFirst{Submitter: te}
		// Every batch of the first look at each object fails; nothing in the
		// cluster changes afterwards, so only a retry can store them.
		flaky.n.Store(3)
		startReaderOn(t, c, w.Namespace(), flaky)
		v := verdict(t, te, "R1", rollout.VerdictApplied)
		if !slices.Equal(layerNames(v), []string{"retry/apps", "retry/infra"}) || flaky.n.Load() >= 0 {
			t.Fatalf("layers %v, failures left %d", layerNames(v), flaky.n.Load())
		}
	})

	t.Run("a deletion the store refused is retried", func(t *testing.T) {
		w := newWorld(t, "retry-delete")
		w.Source("fleet", revOf("R1"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R2"), Attempted: revOf("R2"),
			Ready: w.Ready("Unknown", "Progressing", "Reconciliation in progress", 8*time.Minute)})
		te := startEngine(t, t.TempDir(), now)
		flaky := &failingFirst{Submitter: te}
		startReaderOn(t, c, w.Namespace(), flaky)
		waitFor(t, "both layers expected", func() bool {
			v := te.Get(rollout.Key{Cluster: "prod", Hash: hashOf("R1")})
			return v != nil && v.Layers.Len() == 2
		})
		// The look at the deletion fails once: the retry must still say
		// that apps is no longer expected, so R1 applies on infra alone.
		flaky.n.Store(1)
		w.Delete("apps")
		v := verdict(t, te, "R1", rollout.VerdictApplied)
		if !slices.Equal(layerNames(v), []string{"retry-delete/infra"}) || flaky.n.Load() >= 0 {
			t.Fatalf("layers %v, failures left %d", layerNames(v), flaky.n.Load())
		}
	})

	t.Run("an observation the model refuses is not retried", func(t *testing.T) {
		w := newWorld(t, "refused")
		w.Source("fleet", revOf("R1"))
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", Applied: revOf("R1"), Attempted: revOf("R1"), Ready: applied(w, "R1", 9*time.Minute)})
		te := startEngine(t, t.TempDir(), now)
		refuse := &refusing{Submitter: te, marker: "refuse me"}
		startReaderOn(t, c, w.Namespace(), refuse)
		verdict(t, te, "R1", rollout.VerdictApplied)
		w.SetStatus("apps", revOf("R1"), revOf("R1"), w.Ready("True", "ReconciliationSucceeded", "refuse me", time.Minute))
		waitFor(t, "the look refused", func() bool { return refuse.n.Load() > 0 })
		// A retry would come 5 ms later (the queue's first backoff); objects
		// created now are stored well after that.
		w.Source("other", revOf("Q1"))
		w.Layer(clustertest.Layer{Name: "tenant", Source: "other", Applied: revOf("Q1"), Attempted: revOf("Q1"), Ready: applied(w, "Q1", time.Hour)})
		verdict(t, te, "Q1", rollout.VerdictApplied)
		if n := refuse.n.Load(); n != 1 {
			t.Fatalf("the refused look was made %d times, want once", n)
		}
	})

	t.Run("a prune failure known only from status", func(t *testing.T) {
		w := newWorld(t, "prune")
		w.Source("fleet", revOf("R2"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R2"), Attempted: revOf("R2"), Ready: applied(w, "R2", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R1"), Attempted: revOf("R2"),
			Ready: w.Ready("False", "PruneFailed", `delete failed, errors: ConfigMap/prune/app-protected delete failed: configmaps "app-protected" is forbidden: denied;`, 8*time.Minute)})
		te := run(t, c, w.Namespace(), now)
		v := verdict(t, te, "R2", rollout.VerdictFailed)
		if len(v.Failures) != 1 || len(v.Failures[0].Objects) != 1 || v.Failures[0].Objects[0].Name != "app-protected" {
			t.Fatalf("failures %+v", v.Failures)
		}
	})

	t.Run("a suspended layer and a layer on another source are not expected", func(t *testing.T) {
		w := newWorld(t, "suspended")
		w.Source("fleet", revOf("R8"))
		w.Source("other", revOf("Q1"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R8"), Attempted: revOf("R8"), Ready: applied(w, "R8", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "platform", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R8"), Attempted: revOf("R8"), Ready: applied(w, "R8", 8*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"platform"}, Suspend: true, Applied: revOf("R7"), Attempted: revOf("R7"), Ready: applied(w, "R7", time.Hour)})
		w.Layer(clustertest.Layer{Name: "tenant", Source: "other", Applied: revOf("Q1"), Attempted: revOf("Q1"), Ready: applied(w, "Q1", time.Hour)})
		te := run(t, c, w.Namespace(), now)
		v := verdict(t, te, "R8", rollout.VerdictApplied)
		if !slices.Equal(layerNames(v), []string{"suspended/infra", "suspended/platform"}) {
			t.Fatalf("layers %v", layerNames(v))
		}
	})

	t.Run("stuck names the root cause two tiers up", func(t *testing.T) {
		w := newWorld(t, "stuck")
		w.Source("fleet", revOf("R3"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R3"), Attempted: revOf("R3"), Ready: applied(w, "R3", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "platform", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R2"), Attempted: revOf("R2")})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"platform"}, Applied: revOf("R2"), Attempted: revOf("R3"),
			Ready: w.Ready("Unknown", "Progressing", "Reconciliation in progress", 8*time.Minute)})
		w.Layer(clustertest.Layer{Name: "edge", Source: "fleet", DependsOn: []string{"apps"}, Applied: revOf("R2"), Attempted: revOf("R2"),
			Ready: w.Ready("False", "DependencyNotReady", "Dependencies do not meet ready condition", 8*time.Minute)})
		te := run(t, c, w.Namespace(), now.Add(time.Hour))
		v := verdict(t, te, "R3", rollout.VerdictStuck)
		if v.RootCause != "stuck/platform" {
			t.Fatalf("root cause %q, want stuck/platform", v.RootCause)
		}
	})

	t.Run("webhook and status evidence in both orders give one set of mails", func(t *testing.T) {
		for _, webhookFirst := range []bool{true, false} {
			ns := fmt.Sprintf("order-%v", webhookFirst)
			w := newWorld(t, ns)
			w.Source("fleet", revOf("R5"))
			for i, l := range []string{"infra", "apps"} {
				w.Layer(clustertest.Layer{Name: l, Source: "fleet", Applied: revOf("R5"), Attempted: revOf("R5"),
					Ready: applied(w, "R5", time.Duration(9-i)*time.Minute)})
			}
			te := startEngine(t, t.TempDir(), now, "ops@example.com")
			webhook := func() {
				for i, l := range []string{"infra", "apps"} {
					o := rollout.Observation{Cluster: "prod", Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: ns, Name: l},
						Revision: revOf("R5"), Hash: hashOf("R5"), At: now.Add(-time.Duration(9-i) * time.Minute),
						Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded"}
					if err := te.Submit(context.Background(), o); err != nil {
						t.Fatal(err)
					}
				}
			}
			if webhookFirst {
				webhook()
			}
			startReader(t, c, ns, te)
			verdict(t, te, "R5", rollout.VerdictApplied)
			if !webhookFirst {
				webhook()
			}
			if got := te.Queued(t, hashOf("R5")); !slices.Equal(got, []string{"applied ops@example.com", "applying ops@example.com"}) {
				t.Fatalf("webhook first %v: mails %v", webhookFirst, got)
			}
		}
	})

	t.Run("a restart mid-rollout resumes without missing or repeating", func(t *testing.T) {
		w := newWorld(t, "restart")
		w.Source("fleet", revOf("R6"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R6"), Attempted: revOf("R6"), Ready: applied(w, "R6", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", DependsOn: []string{"infra"}, Applied: revOf("R5"), Attempted: revOf("R6"),
			Ready: w.Ready("Unknown", "Progressing", "Reconciliation in progress", 8*time.Minute)})
		dir := t.TempDir()
		te := startEngine(t, dir, now, "ops@example.com")
		stop := startReader(t, c, w.Namespace(), te)
		verdict(t, te, "R6", rollout.VerdictApplying)
		stop()
		te.Stop()

		// While the service is down, apps finishes.
		w.SetStatus("apps", revOf("R6"), revOf("R6"), applied(w, "R6", 2*time.Minute))
		te = startEngine(t, dir, now, "ops@example.com")
		startReader(t, c, w.Namespace(), te)
		v := verdict(t, te, "R6", rollout.VerdictApplied)
		if !v.CompletedAt.Equal(now.Add(-2 * time.Minute)) {
			t.Fatalf("completed at %v", v.CompletedAt)
		}
		if got := te.Queued(t, hashOf("R6")); !slices.Equal(got, []string{"applied ops@example.com", "applying ops@example.com"}) {
			t.Fatalf("mails %v", got)
		}
	})

	t.Run("a layer deleted mid-rollout stops being expected", func(t *testing.T) {
		w := newWorld(t, "deleted")
		w.Source("fleet", revOf("R9"))
		w.Layer(clustertest.Layer{Name: "infra", Source: "fleet", Applied: revOf("R9"), Attempted: revOf("R9"), Ready: applied(w, "R9", 9*time.Minute)})
		w.Layer(clustertest.Layer{Name: "legacy", Source: "fleet", Applied: revOf("R8"), Attempted: revOf("R9"),
			Ready: w.Ready("Unknown", "Progressing", "Reconciliation in progress", 8*time.Minute)})
		te := run(t, c, w.Namespace(), now)
		verdict(t, te, "R9", rollout.VerdictApplying)
		w.Delete("legacy")
		v := verdict(t, te, "R9", rollout.VerdictApplied)
		if !slices.Equal(layerNames(v), []string{"deleted/infra"}) {
			t.Fatalf("layers %v", layerNames(v))
		}
	})
}

// TestReaderHelmRelease: with no event at all, a HelmRelease's status on
// the real kube-apiserver says how the commit whose apply changed it went:
// the layer's history names that commit (its first reconciliation came
// after kustomize-controller's apply, whose time the field manager on the
// HelmRelease keeps), and the status says whether helm-controller's
// attempt at that spec released it or failed, and what remediation did.
func TestReaderHelmRelease(t *testing.T) {
	c := clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	for _, tt := range []struct {
		name    string
		ready   map[string]any
		extra   []any
		want    rollout.Verdict
		attempt int64 // lastAttemptedGeneration; 0: the current one
	}{
		{name: "released", want: rollout.VerdictApplied,
			ready: map[string]any{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": "Helm upgrade succeeded for release helm/web.v2 with chart web@1.0.0"}},
		{name: "failed", want: rollout.VerdictFailed,
			ready: map[string]any{"type": "Ready", "status": "False", "reason": "UpgradeFailed", "message": "Helm upgrade failed"},
			extra: []any{
				map[string]any{"type": "Released", "status": "False", "reason": "UpgradeFailed", "message": "Helm upgrade failed for release helm/web with chart web@1.0.0: boom"},
				map[string]any{"type": "Remediated", "status": "True", "reason": "RollbackSucceeded", "message": "Helm rollback to previous release helm/web.v1 with chart web@1.0.0 succeeded"},
			}},
		{name: "not attempted yet", want: rollout.VerdictApplying, attempt: 1,
			ready: map[string]any{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": "Helm upgrade succeeded for release helm/web.v1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := c.NewWorld(t, "helm-"+strings.ReplaceAll(tt.name, " ", "-"), now)
			ns := w.Namespace()
			// kustomize-controller's apply of the HelmRelease, as its field
			// manager: the kube-apiserver stamps it now.
			hr := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
				"metadata": map[string]any{"name": "web", "namespace": ns, "labels": map[string]any{
					"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": ns}},
				"spec": map[string]any{"interval": "1h", "chartRef": map[string]any{"kind": "OCIRepository", "name": "web"},
					"values": map[string]any{"message": "v2"}},
			}}
			if err := c.ServerSideApply(context.Background(), hr, "kustomize-controller", false); err != nil {
				t.Fatal(err)
			}
			ri, err := c.ResourceFor("helm.toolkit.fluxcd.io/v2", "HelmRelease", ns)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ri.Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gen := got.GetGeneration()
			attempt := gen
			if tt.attempt > 0 {
				attempt = tt.attempt
				// A spec helm-controller has not acted on: a second apply.
				hr.Object["spec"].(map[string]any)["values"] = map[string]any{"message": "v3"}
				if err := c.ServerSideApply(context.Background(), hr, "kustomize-controller", false); err != nil {
					t.Fatal(err)
				}
				if got, err = ri.Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
					t.Fatal(err)
				}
				gen = got.GetGeneration()
			}
			ready := maps.Clone(tt.ready)
			ready["lastTransitionTime"] = time.Now().UTC().Add(time.Second).Format(time.RFC3339)
			for _, c := range tt.extra {
				c.(map[string]any)["lastTransitionTime"] = ready["lastTransitionTime"]
			}
			got.Object["status"] = map[string]any{"observedGeneration": gen, "lastAttemptedGeneration": attempt,
				"conditions": append([]any{ready}, tt.extra...)}
			if _, err := ri.UpdateStatus(context.Background(), got, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			// apps applied R2 in a reconciliation that ended after that
			// apply; R1 long before.
			w.Source("fleet", revOf("R2"))
			later := time.Now().UTC().Add(time.Minute)
			w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", Applied: revOf("R2"), Attempted: revOf("R2"),
				Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+revOf("R2"), -time.Minute),
				History: []any{
					clustertest.HistoryEntry(revOf("R1"), now.Add(-time.Hour), now.Add(-50*time.Minute)),
					clustertest.HistoryEntry(revOf("R2"), later, later),
				}})
			te := run(t, c, ns, now)
			if tt.want == rollout.VerdictApplying {
				// The layer applied it, and its release says it holds: it
				// stays applying however long one waits.
				waitFor(t, "the release held by the layer", func() bool {
					v := te.Get(rollout.Key{Cluster: "prod", Hash: hashOf("R2")})
					return v != nil && v.Layers.Len() == 1 && len(v.Layers.At(0).Releases) == 1
				})
				v := te.Get(rollout.Key{Cluster: "prod", Hash: hashOf("R2")})
				if v.Verdict != rollout.VerdictApplying || v.Layers.At(0).Releases[0].State != rollout.LayerProgressing {
					t.Fatalf("a release not attempted at its generation: %s, %+v", v.Verdict, v.Layers.At(0).Releases)
				}
				return
			}
			v := verdict(t, te, "R2", tt.want)
			if l := v.Layers.At(0); len(l.Releases) != 1 || l.Releases[0].Name != "web" {
				t.Fatalf("the layer's releases: %+v", l.Releases)
			}
			if tt.want == rollout.VerdictFailed {
				f := v.Failures[0]
				if f.Release.String() != "HelmRelease/"+ns+"/web" || f.Reason != "UpgradeFailed" || !strings.Contains(f.Message, "boom") ||
					f.Remediation != "rolled back to v1: the cluster runs the previous release" || f.Class != rollout.FailureRelease {
					t.Fatalf("failure %+v", f)
				}
			}
			if r1 := verdict(t, te, "R1", rollout.VerdictApplied); len(r1.Layers.At(0).Releases) != 0 {
				t.Fatalf("R1, whose apply did not change the release, is held by it: %+v", r1.Layers.At(0))
			}
		})
	}
}

// TestReaderReleaseFollowsItsSource: a HelmRelease whose chart is built
// from every revision of its layer's own GitRepository (reconcileStrategy
// Revision) is held by each revision the layer reaches, though no apply
// changes its spec: the layer's success alone does not make it applied,
// and its status names the commit its chart was built from.
func TestReaderReleaseFollowsItsSource(t *testing.T) {
	c := clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	w := c.NewWorld(t, "helm-follows", now)
	ns := w.Namespace()
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "web", "namespace": ns, "labels": map[string]any{
			"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": ns}},
		"spec": map[string]any{"interval": "1h", "chart": map[string]any{"spec": map[string]any{
			"chart": "./charts/web", "reconcileStrategy": "Revision", "sourceRef": map[string]any{"kind": "GitRepository", "name": "fleet"}}}},
	}}
	if err := c.ServerSideApply(context.Background(), hr, "kustomize-controller", false); err != nil {
		t.Fatal(err)
	}
	ri, err := c.ResourceFor("helm.toolkit.fluxcd.io/v2", "HelmRelease", ns)
	if err != nil {
		t.Fatal(err)
	}
	// helm-controller's attempt: the chart built from commit label.
	attempt := func(label, status, reason string) {
		t.Helper()
		got, err := ri.Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC().Add(time.Second).Format(time.RFC3339)
		got.Object["status"] = map[string]any{"observedGeneration": got.GetGeneration(), "lastAttemptedGeneration": got.GetGeneration(),
			"lastAttemptedRevision": "1.0.0+" + hashOf(label)[:12],
			"conditions":            []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": "Helm " + reason, "lastTransitionTime": at}}}
		if _, err := ri.UpdateStatus(context.Background(), got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	attempt("R2", "True", "UpgradeSucceeded")
	// apps applied R2 (which created the release), then R3, which changed
	// only the chart.
	w.Source("fleet", revOf("R3"))
	w.Layer(clustertest.Layer{Name: "apps", Source: "fleet", Applied: revOf("R3"), Attempted: revOf("R3"),
		Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+revOf("R3"), -time.Minute),
		History: []any{
			clustertest.HistoryEntry(revOf("R2"), now.Add(-10*time.Minute), now.Add(-10*time.Minute)),
			clustertest.HistoryEntry(revOf("R3"), now.Add(-5*time.Minute), now.Add(-time.Minute)),
		}})
	te := startEngine(t, t.TempDir(), now)
	r, _ := startReaderWith(t, c, ns, te)
	// What a forge reads of the source: its repository.
	if u, ok := r.SourceURL("GitRepository", ns, "fleet"); !ok || u != "https://example.com/fleet.git" {
		t.Errorf("SourceURL of the GitRepository: %q %v", u, ok)
	}
	if u, ok := r.SourceURL("GitRepository", ns, "none"); ok {
		t.Errorf("SourceURL of no source: %q", u)
	}
	if v := verdict(t, te, "R2", rollout.VerdictApplied); len(v.Layers.At(0).Releases) != 1 {
		t.Fatalf("R2 created the release: %+v", v.Layers.At(0))
	}
	waitFor(t, "R3 held by the release", func() bool {
		v := te.Get(rollout.Key{Cluster: "prod", Hash: hashOf("R3")})
		return v != nil && v.Layers.Len() == 1 && len(v.Layers.At(0).Releases) == 1
	})
	if v := te.Get(rollout.Key{Cluster: "prod", Hash: hashOf("R3")}); v.Verdict != rollout.VerdictApplying {
		t.Fatalf("R3 before helm-controller attempted its chart: %s, %+v", v.Verdict, v.Layers.At(0))
	}
	attempt("R3", "False", "UpgradeFailed")
	v := verdict(t, te, "R3", rollout.VerdictFailed)
	if f := v.Failures[0]; f.Release.String() != "HelmRelease/"+ns+"/web" || f.Reason != "UpgradeFailed" {
		t.Fatalf("failure %+v", f)
	}
	if v := verdict(t, te, "R2", rollout.VerdictApplied); len(v.Failures) > 0 {
		t.Fatalf("R3's failure went to R2: %+v", v.Failures)
	}
}

// TestReaderNoticesAccessLost: the API server does not check a watch
// already open again, so the reader checks its access itself, every
// AccessEvery. A permission withdrawn (the binding deleted) is its
// Warning, the cluster not Up, logged once however many checks find it;
// restored, the warning goes. Credentials refused (its ServiceAccount
// deleted: the token is rejected) are named as such.
func TestReaderNoticesAccessLost(t *testing.T) {
	c := clustertest.Start(t)
	token := c.ServiceAccountToken(t, "fdn", "reader")
	reader := rbacv1.Subject{Kind: "ServiceAccount", Name: "reader", Namespace: "fdn"}
	c.Grant(t, "fdn-reader", cluster.Rules(), reader)

	// Count the access checks' lists (limit=1), to know several ran.
	var probes atomic.Int64
	cfg := c.ConfigWithToken(token)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("limit") == "1" {
				probes.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	var logs syncbuf.Buffer
	r, err := cluster.NewForConfig(cfg, submitNothing{}, cluster.Config{Cluster: "prod", AccessEvery: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(&logs, nil)), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	runReader(t, r)
	waitFor(t, "caches to sync", func() bool { return r.Up() })

	c.Revoke(t, "fdn-reader")
	waitFor(t, "the withdrawn permission named", func() bool {
		return strings.Contains(r.Warning(), "is forbidden: grant get, list and watch") && !r.Up()
	})
	seen := probes.Load()
	waitFor(t, "three more checks", func() bool { return probes.Load() > seen+3 })
	if !strings.Contains(r.Warning(), "is forbidden") {
		t.Fatalf("warning %q after more checks", r.Warning())
	}
	c.Grant(t, "fdn-reader", cluster.Rules(), reader)
	waitFor(t, "access back", func() bool { return r.Warning() == "" && r.Up() })
	if n := strings.Count(logs.String(), "cluster access lost"); n != 1 {
		t.Fatalf("access lost logged %d times in one episode:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "cluster access back"); n != 1 {
		t.Fatalf("access back logged %d times:\n%s", n, logs.String())
	}

	if err := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).
		Namespace("fdn").Delete(context.Background(), "reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused credentials named", func() bool {
		return strings.Contains(r.Warning(), "the API server refuses the credentials (401 Unauthorized") && !r.Up()
	})
	if strings.Contains(logs.String(), token) || strings.Contains(r.Warning(), token) {
		t.Fatal("the token reached a log or a warning")
	}
}

type submitNothing struct{}

func (submitNothing) SubmitAll(context.Context, []rollout.Observation) error { return nil }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestFailedReaderLeavesNothingRunning: a reader whose caches did not
// sync in time returns the error and leaves no informer watching and no
// queue waiting behind it (a hub drops it and starts another: each one
// left behind would hold a cluster's caches for good), though the
// context it ran in goes on.
func TestFailedReaderLeavesNothingRunning(t *testing.T) {
	c := clustertest.Start(t)
	w := c.NewWorld(t, "fleet", time.Now().UTC().Truncate(time.Second))
	w.Source("src", revOf("a"))
	running := func() int {
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return strings.Count(stacks, "tools/cache.(*Reflector)") + strings.Count(stacks, "workqueue.(*delayingType")
	}
	before := running()
	for range 3 {
		r, err := cluster.NewForConfig(c.Config, submitNothing{}, cluster.Config{Cluster: "prod", Namespaces: []string{"fleet"}, SyncTimeout: time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CheckAccess(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "did not sync in time") {
			t.Fatalf("a reader given a millisecond to sync: %v", err)
		}
	}
	waitFor(t, "the failed readers' informers and queues to end", func() bool { return running() <= before })
}
