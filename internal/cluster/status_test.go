package cluster

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// kustomization is a Kustomization as kustomize-controller v1.9 writes it,
// with objects entries in its inventory, a Ready condition of the given
// status, reason and message, and a Reconciling one when reconciling.
func kustomization(name string, objects int, ready, reason, msg string, reconciling bool) *unstructured.Unstructured {
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	prev := "main@sha1:95ced8b1219be2c3ac1a82adaf105a3211fd5946"
	var entries []string
	for i := range objects {
		entries = append(entries, fmt.Sprintf(`{"id":"apps_web-%d_apps_Deployment","v":"v1"}`, i))
	}
	conds := []string{
		fmt.Sprintf(`{"type":"Ready","status":%q,"reason":%q,"message":%q,"lastTransitionTime":"2026-11-30T12:44:10Z","observedGeneration":3}`, ready, reason, msg),
		`{"type":"Healthy","status":"True","reason":"Succeeded","message":"Health check passed in 2.1s","lastTransitionTime":"2026-11-30T12:40:00Z","observedGeneration":3}`,
	}
	if reconciling {
		conds = append(conds, `{"type":"Reconciling","status":"True","reason":"Progressing","message":"Running health checks for revision `+rev+` with a timeout of 5m0s","lastTransitionTime":"2026-11-30T12:44:10Z","observedGeneration":3}`)
	}
	doc := `{"apiVersion":"kustomize.toolkit.fluxcd.io/v1","kind":"Kustomization",
	"metadata":{"name":"` + name + `","namespace":"flux-system","uid":"7d0cdc51-ddcf-4743-b223-83ca5c699632","resourceVersion":"123456","generation":3,
		"labels":{"kustomize.toolkit.fluxcd.io/name":"flux-system","kustomize.toolkit.fluxcd.io/namespace":"flux-system"},
		"finalizers":["finalizers.fluxcd.io"],"creationTimestamp":"2026-11-01T00:00:00Z"},
	"spec":{"interval":"10m","path":"./apps","prune":true,"wait":true,"timeout":"5m","suspend":false,
		"sourceRef":{"kind":"GitRepository","name":"flux-system"},"dependsOn":[{"name":"platform"},{"name":"infra","namespace":"infra"}],
		"patches":[{"patch":"- op: replace\n  path: /spec/replicas\n  value: 3","target":{"kind":"Deployment","name":"web"}}],
		"postBuild":{"substitute":{"cluster":"prod","region":"eu-west-1"}}},
	"status":{"observedGeneration":3,"lastAppliedRevision":"` + prev + `","lastAttemptedRevision":"` + rev + `",
		"lastAppliedOriginRevision":"v1.4.2@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1","lastHandledReconcileAt":"2026-11-30T12:43:00Z",
		"conditions":[` + strings.Join(conds, ",") + `],
		"history":[{"digest":"sha256:1d2a","firstReconciled":"2026-11-30T12:00:00Z","lastReconciled":"2026-11-30T12:30:00Z","lastReconciledDuration":"2.1s","lastReconciledStatus":"ReconciliationSucceeded","metadata":{"revision":"` + prev + `"},"totalReconciliations":3},
			{"digest":"sha256:0c1b","firstReconciled":"2026-11-29T12:00:00Z","lastReconciled":"2026-11-29T12:30:00Z","lastReconciledDuration":"1.9s","lastReconciledStatus":"HealthCheckFailed","metadata":{"revision":"main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"},"totalReconciliations":1}],
		"inventory":{"entries":[` + strings.Join(entries, ",") + `]}}}`
	return decode(doc)
}

func gitRepository(name string) *unstructured.Unstructured {
	return decode(`{"apiVersion":"source.toolkit.fluxcd.io/v1","kind":"GitRepository",
	"metadata":{"name":"` + name + `","namespace":"flux-system","uid":"0f1e2d3c","resourceVersion":"654321","generation":1},
	"spec":{"interval":"1m","url":"ssh://git@github.com/example/fleet","ref":{"branch":"main"},"secretRef":{"name":"flux-system"}},
	"status":{"observedGeneration":1,"artifact":{"digest":"sha256:9f8e","lastUpdateTime":"2026-11-30T12:43:25Z","path":"gitrepository/flux-system/flux-system/731f7ead.tar.gz",
		"revision":"main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1","size":40960,"url":"http://source-controller.flux-system.svc.cluster.local./gitrepository/flux-system/flux-system/731f7ead.tar.gz"},
		"conditions":[{"type":"Ready","status":"True","reason":"Succeeded","message":"stored artifact for revision 'main@sha1:731f7ead'","lastTransitionTime":"2026-11-30T12:43:25Z"}]}}`)
}

func decode(doc string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(doc)); err != nil {
		panic(err)
	}
	return u
}

// cachedLayer is u as the reader caches it: served as JSON, decoded by
// the Kustomizations' client, slimmed by its informer's transform; the
// error is the one the codec reports of a layer that does not fit.
func cachedLayer(t testing.TB, u *unstructured.Unstructured) (*kustomizev1.Kustomization, error) {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	obj, _, err := wireCodec{kind: layerKind(), failed: func(_ metav1.Object, err error) { failed = err }}.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return slimLayer(obj.(*kustomizev1.Kustomization)), failed
}

// whole is all of a Kustomization in Flux's type.
func whole(t testing.TB, u *unstructured.Unstructured) *kustomizev1.Kustomization {
	k := &kustomizev1.Kustomization{}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSlimKeepsWhatIsRead: every reading of a cached object gives the same
// from the slim one as from the whole, over each state of the Ready
// condition ingest.Status tells apart, and what nothing reads is gone.
func TestSlimKeepsWhatIsRead(t *testing.T) {
	prune := "delete failed, errors: ConfigMap/apps/old-config delete failed: configmaps \"old-config\" is forbidden;"
	for _, u := range []*unstructured.Unstructured{
		kustomization("applied", 40, "True", flux.ReasonReconciliationSucceeded, "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", false),
		kustomization("prune", 40, "False", flux.ReasonPruneFailed, prune, false),
		kustomization("health", 40, "False", flux.ReasonHealthCheckFailed, "timeout waiting for: [Deployment/apps/web status: 'InProgress']", false),
		kustomization("waiting", 0, "False", flux.ReasonDependencyNotReady, "Dependencies do not meet ready condition, retrying in 30s", false),
		kustomization("canceled", 40, "False", flux.ReasonHealthCheckCanceled, "Health checks canceled", false),
		kustomization("reconciling", 40, "Unknown", flux.ReasonProgressing, "Reconciliation in progress", true),
	} {
		s, err := cachedLayer(t, u)
		if err != nil {
			t.Fatal(err)
		}
		k := whole(t, u)
		if len(k.Status.Inventory.Entries) == 0 && u.GetName() != "waiting" {
			t.Fatalf("%s: the whole object has no inventory", u.GetName())
		}
		want := ingest.Status(k, "prod", "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567")
		if len(want) == 0 {
			t.Fatalf("%s: the whole object gives no observation: the case tests nothing", k.Name)
		}
		if got := ingest.Status(s, "prod", "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: ingest.Status of the slim object\n got %+v\nwant %+v", k.Name, got, want)
		}
		if ingest.SourceOf(s) != ingest.SourceOf(k) || !reflect.DeepEqual(ingest.DependsOn(s), ingest.DependsOn(k)) || len(ingest.DependsOn(k)) != 2 {
			t.Errorf("%s: sourceRef or dependsOn differ: %v %v / %v %v", k.Name, ingest.SourceOf(s), ingest.DependsOn(s), ingest.SourceOf(k), ingest.DependsOn(k))
		}
		if s.Spec.Suspend != k.Spec.Suspend || s.Generation != k.Generation || s.Generation == 0 || s.Name != k.Name || s.Namespace != k.Namespace {
			t.Errorf("%s: suspend, generation or name differ: %+v / %+v", k.Name, s.ObjectMeta, k.ObjectMeta)
		}
		if s.Status.Inventory != nil || s.Spec.Patches != nil || s.Spec.PostBuild != nil || s.Labels != nil || s.Spec.Path != "" {
			t.Errorf("%s: the slim object still has what nothing reads: %+v", k.Name, s)
		}
		for _, c := range s.Status.Conditions {
			if c.Type != "Ready" && c.Type != "Reconciling" {
				t.Errorf("%s: the slim object keeps the %s condition", k.Name, c.Type)
			}
		}
	}

	u := gitRepository("flux-system")
	src, err := slimSource(flux.KindGitRepository, u)
	if err != nil {
		t.Fatal(err)
	}
	whole := &sourcev1.GitRepository{}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, whole); err != nil {
		t.Fatal(err)
	}
	rev, at := ingest.ArtifactRevision(src)
	if wantRev, wantAt := ingest.ArtifactRevision(whole); rev != wantRev || !at.Equal(wantAt) || rev == "" || at.IsZero() {
		t.Errorf("artifact of the slim source: %s %v, whole %s %v", rev, at, wantRev, wantAt)
	}
	// Its URL stays: the repository a forge shows its rollouts in.
	if g := src.(*sourcev1.GitRepository); g.Spec.URL != "ssh://git@github.com/example/fleet" || g.Spec.Interval.Duration != 0 ||
		g.Spec.Reference != nil || g.Spec.SecretRef != nil || g.Status.Conditions != nil || g.Name != "flux-system" {
		t.Errorf("the slim source: %+v", g)
	}
	// A source before its first artifact has none.
	unstructured.RemoveNestedField(u.Object, "status", "artifact")
	if src, err := slimSource(flux.KindGitRepository, u); err != nil || src.GetArtifact() != nil {
		t.Errorf("no artifact: %v, %+v", err, src.GetArtifact())
	}
}

// BenchmarkCachedLayer reports the heap a cached Kustomization takes, whole
// and slim, with 100 objects in its inventory (a middling layer).
func BenchmarkCachedLayer(b *testing.B) {
	body, err := json.Marshal(kustomization("apps", 100, "True", flux.ReasonReconciliationSucceeded, "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", false).Object)
	if err != nil {
		b.Fatal(err)
	}
	const n = 2000
	for _, tt := range []struct {
		name string
		keep func(*unstructured.Unstructured) k8sruntime.Object
	}{
		{"whole", func(u *unstructured.Unstructured) k8sruntime.Object { return u }},
		{"slim", func(u *unstructured.Unstructured) k8sruntime.Object {
			k, err := cachedLayer(b, u)
			if err != nil {
				b.Fatal(err)
			}
			return k
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var perLayer float64
			for b.Loop() {
				cache := make([]k8sruntime.Object, n)
				before := LiveHeap()
				for i := range cache {
					cache[i] = tt.keep(decode(string(body)))
				}
				perLayer = float64(LiveHeap()-before) / n
				runtime.KeepAlive(cache)
			}
			b.ReportMetric(perLayer, "cached-B/layer")
		})
	}
}

// LiveHeap is the heap in use after a collection (exported for the
// benchmarks of package cluster_test too).
func LiveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSlimLayerThatDoesNotConvert: a Kustomization whose fields do not fit
// Flux's type (none the API server validated can) is still cached, by
// name: an informer whose transform failed would stop syncing for every
// other object. A spec that does not convert leaves it nobody's layer; a
// status that does not convert leaves it a layer of its source without
// progress, still expected, so that no rollout turns applied without it.
func TestSlimLayerThatDoesNotConvert(t *testing.T) {
	applied := "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	for _, tt := range []struct {
		field  []string
		source string // the slim object's source
	}{
		{[]string{"spec", "suspend"}, ""},
		{[]string{"status", "observedGeneration"}, "flux-system"},
	} {
		u := kustomization("odd", 1, "True", flux.ReasonReconciliationSucceeded, applied, false)
		if err := unstructured.SetNestedField(u.Object, "yes", tt.field...); err != nil {
			t.Fatal(err)
		}
		k, err := cachedLayer(t, u)
		if err == nil {
			t.Fatalf("a string for %v converted", tt.field)
		}
		if k == nil || k.Name != "odd" || k.Namespace != "flux-system" || k.Generation != 3 || ingest.SourceOf(k).Name != tt.source {
			t.Fatalf("%v: cached as %+v", tt.field, k)
		}
		if obs := ingest.Status(k, "prod", ""); len(obs) != 0 {
			t.Fatalf("%v: observations from an object that did not convert: %+v", tt.field, obs)
		}
	}
}

// cachedRelease is u as the reader caches it, read back as Flux's type:
// served as JSON, decoded by the HelmReleases' client, slimmed by its
// informer's transform.
func cachedRelease(t testing.TB, u *unstructured.Unstructured) *helmv2.HelmRelease {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := wireCodec{kind: releaseKind()}.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return slimRelease(obj.(*helmv2.HelmRelease)).helmRelease()
}

// helmRelease is a whole HelmRelease as the kube-apiserver serves it:
// applied by kustomize-controller (and touched by another manager), with
// values, an inventory, a history of three releases (not newest first:
// the newest is the highest version) and every condition helm-controller
// writes.
func helmRelease(ready, readyReason string, attempted int64) *unstructured.Unstructured {
	at := func(min int) string { return time.Date(2026, 11, 30, 12, min, 0, 0, time.UTC).Format(time.RFC3339) }
	cond := func(typ, status, reason, msg string, min int) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": at(min)}
	}
	entry := func(v int64, min int) map[string]any {
		return map[string]any{"name": "web", "namespace": "apps", "version": v, "status": "deployed", "chartName": "web",
			"chartVersion": "1.0.0", "configDigest": "sha256:ab", "digest": "sha256:cd", "firstDeployed": at(0), "lastDeployed": at(min)}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "uid": "u1", "resourceVersion": "7", "generation": int64(4),
			"labels":      map[string]any{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system", "team": "web"},
			"annotations": map[string]any{"note": "x"},
			"managedFields": []any{
				map[string]any{"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "helm.toolkit.fluxcd.io/v2",
					"time": at(10), "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{}}},
				map[string]any{"manager": "helm-controller", "operation": "Update", "apiVersion": "helm.toolkit.fluxcd.io/v2",
					"time": at(12), "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:status": map[string]any{}}, "subresource": "status"},
			}},
		"spec": map[string]any{"interval": "1h", "chartRef": map[string]any{"kind": "OCIRepository", "name": "web"},
			"values": map[string]any{"replicas": int64(3), "image": map[string]any{"tag": "v1.4.2"}}},
		"status": map[string]any{
			"observedGeneration": int64(4), "lastAttemptedGeneration": attempted, "lastAttemptedReleaseAction": "upgrade",
			"lastAttemptedRevision": "1.0.0", "failures": int64(1), "upgradeFailures": int64(1), "storageNamespace": "apps", "helmChart": "apps/apps-web",
			"history":   []any{entry(4, 5), entry(5, 13), entry(3, 1)},
			"inventory": map[string]any{"entries": []any{map[string]any{"id": "apps_web-settings__ConfigMap", "v": "v1"}}},
			"conditions": []any{
				cond("Ready", ready, readyReason, "Helm "+readyReason, 11),
				cond("Released", ready, readyReason, "Helm upgrade for release apps/web: "+readyReason, 11),
				cond("Remediated", "True", "RollbackSucceeded", "Helm rollback to previous release apps/web.v4 with chart web@1.0.0 succeeded", 12),
				cond("Stalled", "True", "RetriesExceeded", "Failed to upgrade after 1 attempt(s)", 12),
				cond("TestSuccess", "True", "TestSucceeded", "tests passed", 11),
				cond("Reconciling", "False", "Succeeded", "done", 12),
			},
		},
	}}
}

// TestSlimReleaseKeepsWhatIsRead: every reading of a slim HelmRelease
// equals the whole object's (its status, the hold its layer's history
// tells, its owner and apply time), and what nothing reads is gone.
func TestSlimReleaseKeepsWhatIsRead(t *testing.T) {
	layer := &kustomizev1.Kustomization{}
	layer.Namespace, layer.Name = "flux-system", "apps"
	layer.Status.History = meta.History{
		{Digest: "sha256:1", FirstReconciled: metav1.NewTime(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)), Metadata: map[string]string{"revision": "main@sha1:" + strings.Repeat("1", 40)}},
		{Digest: "sha256:2", FirstReconciled: metav1.NewTime(time.Date(2026, 11, 30, 12, 10, 30, 0, time.UTC)), Metadata: map[string]string{"revision": "main@sha1:" + strings.Repeat("2", 40)}},
	}
	layer.Spec.SourceRef = kustomizev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "fleet"}
	// An OCI chart whose artifact names the commit it was built from.
	ociChart := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "uid": "u2", "resourceVersion": "3", "generation": int64(1)},
		"spec":     map[string]any{"url": "oci://registry.example/charts/web", "interval": "5m"},
		"status": map[string]any{"artifact": map[string]any{"revision": "1.0.0@sha256:" + strings.Repeat("c", 64),
			"digest": "sha256:" + strings.Repeat("c", 64), "lastUpdateTime": "2026-11-30T12:09:00Z", "path": "x", "url": "http://x",
			"metadata": map[string]any{flux.OCIRevisionMetadata: "main@sha1:" + strings.Repeat("4", 40), "org.opencontainers.image.source": "https://example/web"}}},
	}}
	wholeChart := &sourcev1.OCIRepository{}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(ociChart.Object, wholeChart); err != nil {
		t.Fatal(err)
	}
	slimChart, err := slimSource(sourcev1.OCIRepositoryKind, ociChart)
	if err != nil {
		t.Fatal(err)
	}
	if md := slimChart.GetArtifact().Metadata; len(md) != 2 || md[flux.OCISourceMetadata] != "https://example/web" {
		t.Errorf("the slim OCI artifact's metadata %v: want its revision and source annotations", md)
	}
	withStatus := func(u *unstructured.Unstructured, k, v string) *unstructured.Unstructured {
		u.Object["status"].(map[string]any)[k] = v
		return u
	}
	// A chart built from every revision of the layer's own source.
	follower := withStatus(helmRelease("False", "UpgradeFailed", 4), "lastAttemptedRevision", "1.0.0+222222222222")
	spec := follower.Object["spec"].(map[string]any)
	delete(spec, "chartRef")
	spec["chart"] = map[string]any{"spec": map[string]any{"chart": "./charts/web", "reconcileStrategy": "Revision",
		"sourceRef": map[string]any{"kind": "GitRepository", "name": "fleet", "namespace": "flux-system"}, "valuesFiles": []any{"values.yaml"}}}
	annotated := helmRelease("True", "UpgradeSucceeded", 3)
	annotated.SetAnnotations(map[string]string{flux.CommitAnnotation: "main@sha1:" + strings.Repeat("3", 40), "note": "x"})
	for _, tt := range []struct {
		u       *unstructured.Unstructured
		commit  string
		follows bool
	}{
		{helmRelease("True", "UpgradeSucceeded", 4), "", false},
		{helmRelease("False", "UpgradeFailed", 4), "", false},
		{helmRelease("True", "UpgradeSucceeded", 3), "", false}, // not attempted at this generation
		{follower, "222222222222", true},
		{annotated, strings.Repeat("3", 40), false},
		{withStatus(helmRelease("True", "UpgradeSucceeded", 4), "lastAttemptedRevisionDigest", "sha256:"+strings.Repeat("c", 64)), strings.Repeat("4", 40), false},
	} {
		u := tt.u
		s := cachedRelease(t, u)
		w := &helmv2.HelmRelease{}
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, w); err != nil {
			t.Fatal(err)
		}
		want := ingest.ReleaseStatus(w, "prod", wholeChart)
		if len(want) == 0 {
			t.Fatal("the whole object gives no observation: the case tests nothing")
		}
		if want[0].Commit != tt.commit || tt.commit != "" && want[0].Layer != ingest.Layer("flux-system", "apps") {
			t.Errorf("the whole object names commit %q on %v, want %q", want[0].Commit, want[0].Layer, tt.commit)
		}
		if rm := want[0].Remedy; want[0].Signal == rollout.SignalFailed && (rm == nil || rm.Attempts != 1 || rm.Remedied != 1 || len(rm.Steps) != 1 || rm.Stalled == nil) {
			t.Errorf("the whole object's failure tells no remediation, counter and stall: %+v", rm)
		}
		if got := ingest.ReleaseStatus(s, "prod", slimChart); !reflect.DeepEqual(got, want) {
			t.Errorf("ingest.ReleaseStatus of the slim object\n got %+v\nwant %+v", got, want)
		}
		if ingest.Follows(w, layer) != tt.follows || ingest.Follows(s, layer) != tt.follows {
			t.Errorf("follows the layer's source: whole %v, slim %v, want %v", ingest.Follows(w, layer), ingest.Follows(s, layer), tt.follows)
		}
		wantHold, ok := ingest.ReleaseHold(w, layer, "prod")
		if gotHold, _ := ingest.ReleaseHold(s, layer, "prod"); !ok || !reflect.DeepEqual(gotHold, wantHold) || wantHold.Hash != strings.Repeat("2", 40) {
			t.Errorf("the hold: slim %+v, whole %+v (%v)", gotHold, wantHold, ok)
		}
		if s.Spec.Values != nil || s.Status.Inventory != nil || len(s.Status.History) != 1 || len(s.Annotations) > 1 || len(s.Labels) != 2 ||
			len(s.ManagedFields) != 1 || s.ManagedFields[0].FieldsV1 != nil {
			t.Errorf("the slim object still has what nothing reads: %+v", s)
		}
	}
}
