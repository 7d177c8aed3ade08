// Package cluster reads Flux's own state with client-go informers (slim
// caches of Kustomizations, sources and HelmReleases) and feeds the engine
// the observations the webhook would, turned into observations by
// internal/ingest: progress from each Kustomization's status and history
// (so rollouts whose webhooks were lost still reach their verdict), which
// layers must apply the current revision of each source (membership
// marks), the releases a layer's apply changed and what their status says
// of them, and the repository a source names (for the forge).
package cluster

import (
	"fmt"
	"maps"
	"reflect"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
)

// slimLayer is a Kustomization as cached: Flux's type, holding only what
// the functions above, ingest.Status and the indexes read. Whole, it
// carries its status.inventory (an entry for every object it applied:
// hundreds in a large layer), conditions nothing reads, and a spec of
// patches and substitutions; cached whole, a fleet's Kustomizations
// outweighed all its live rollouts (BenchmarkReaderHeap). Its inventory
// and managed fields were never decoded (decodeLayer); the rest is left
// here, in the informer's transform.
func slimLayer(k *kustomizev1.Kustomization) *kustomizev1.Kustomization {
	s := &kustomizev1.Kustomization{TypeMeta: k.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: k.Name, Namespace: k.Namespace, UID: k.UID, ResourceVersion: k.ResourceVersion, Generation: k.Generation}}
	s.Spec.SourceRef, s.Spec.DependsOn, s.Spec.Suspend = k.Spec.SourceRef, k.Spec.DependsOn, k.Spec.Suspend
	st := &k.Status
	s.Status.LastAppliedRevision, s.Status.LastAttemptedRevision = st.LastAppliedRevision, st.LastAttemptedRevision
	s.Status.ObservedGeneration = st.ObservedGeneration
	for _, c := range st.Conditions {
		if c.Type == meta.ReadyCondition || c.Type == meta.ReconcilingCondition {
			s.Status.Conditions = append(s.Status.Conditions, c)
		}
	}
	if st.History != nil {
		s.Status.History = make(meta.History, len(st.History))
		for i, h := range st.History {
			s.Status.History[i] = meta.Snapshot{LastReconciledStatus: h.LastReconciledStatus,
				FirstReconciled: h.FirstReconciled, LastReconciled: h.LastReconciled, Metadata: h.Metadata}
		}
	}
	return s
}

// release is a HelmRelease as cached: what ingest.ReleaseStatus,
// ingest.ReleaseHold, ingest.Follows, ingest.ChartSource and the owner
// index read, in fields of its own. Not Flux's type, whose struct alone
// is 880 bytes and whose labels, annotations and managed fields are a
// map or a slice each: a hub caches hundreds of thousands
// (docs/performance.md). helmRelease gives the functions that read it
// Flux's type back.
type release struct {
	metav1.ObjectMeta // its name, namespace, uid, resourceVersion and generation alone
	// owner is the layer that applies it, namespace/name, as ingest.Owner
	// reads its labels ("" for none); commit its commit annotation.
	owner, commit string
	// applied is kustomize-controller's applies of it (ingest.Applied
	// takes the latest), without the fields they manage.
	applied  []metav1.ManagedFieldsEntry
	chartRef *helmv2.CrossNamespaceSourceReference
	chart    *helmv2.HelmChartTemplateSpec // its chart, sourceRef and reconcileStrategy alone
	deployed metav1.Time                   // its newest history entry's lastDeployed
	// status holds no history, and of its conditions those read.
	status helmv2.HelmReleaseStatus
}

// slimRelease is what is cached of hr, decoded slim already (wire.go).
func slimRelease(hr *helmv2.HelmRelease) *release {
	r := &release{ObjectMeta: metav1.ObjectMeta{Name: hr.Name, Namespace: hr.Namespace, UID: hr.UID,
		ResourceVersion: hr.ResourceVersion, Generation: hr.Generation},
		commit: hr.Annotations[flux.CommitAnnotation], chartRef: hr.Spec.ChartRef}
	if ns, name, ok := ingest.Owner(hr); ok {
		r.owner = ns + "/" + name
	}
	for _, mf := range hr.ManagedFields {
		if flux.AppliedByKustomize(mf) {
			r.applied = append(r.applied, metav1.ManagedFieldsEntry{Manager: mf.Manager, Operation: mf.Operation, Time: mf.Time})
		}
	}
	if c := hr.Spec.Chart; c != nil {
		r.chart = &helmv2.HelmChartTemplateSpec{Chart: c.Spec.Chart, SourceRef: c.Spec.SourceRef, ReconcileStrategy: c.Spec.ReconcileStrategy}
	}
	st := &hr.Status
	if h := st.History.Latest(); h != nil {
		r.deployed = h.LastDeployed
	}
	r.status = helmv2.HelmReleaseStatus{ObservedGeneration: st.ObservedGeneration, LastAttemptedGeneration: st.LastAttemptedGeneration,
		LastAttemptedRevision: st.LastAttemptedRevision, LastAttemptedRevisionDigest: st.LastAttemptedRevisionDigest,
		LastAttemptedReleaseAction: st.LastAttemptedReleaseAction, InstallFailures: st.InstallFailures, UpgradeFailures: st.UpgradeFailures}
	for _, c := range st.Conditions {
		switch c.Type {
		case meta.ReadyCondition, helmv2.ReleasedCondition, helmv2.RemediatedCondition, meta.StalledCondition:
			r.status.Conditions = append(r.status.Conditions, c)
		}
	}
	return r
}

// helmRelease is the cached release as Flux's type, for reading only: it
// shares the cache's applies, chart source and conditions.
func (r *release) helmRelease() *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{ObjectMeta: r.ObjectMeta, Status: r.status}
	if ns, name, ok := strings.Cut(r.owner, "/"); ok {
		hr.Labels = map[string]string{flux.OwnerNamespaceLabel: ns, flux.OwnerNameLabel: name}
	}
	if r.commit != "" {
		hr.Annotations = map[string]string{flux.CommitAnnotation: r.commit}
	}
	hr.ManagedFields = r.applied
	hr.Spec.ChartRef = r.chartRef
	if r.chart != nil {
		hr.Spec.Chart = &helmv2.HelmChartTemplate{Spec: *r.chart}
	}
	if !r.deployed.IsZero() {
		hr.Status.History = helmv2.Snapshots{{LastDeployed: r.deployed}}
	}
	return hr
}

// slimSource is a source as cached: Flux's type with its artifact, and a
// GitRepository's URL, not the rest of its spec and its conditions, which
// nothing reads.
func slimSource(kind string, u *unstructured.Unstructured) (sourcev1.Source, error) {
	sk, ok := flux.KindOf(kind)
	if !ok || sk.Role != flux.Source {
		return nil, fmt.Errorf("%s is not a source kind", kind)
	}
	slim := map[string]any{}
	if spec, ok := u.Object["spec"].(map[string]any); ok && len(sk.Spec) > 0 {
		// A GitRepository's url: the repository a forge shows its
		// rollouts in (forge.Repos).
		slim["spec"] = pick(spec, sk.Spec...)
	}
	status, _ := u.Object["status"].(map[string]any)
	if artifact, ok := status["artifact"].(map[string]any); ok {
		a := pick(artifact, "revision", "lastUpdateTime")
		// An OCI artifact's: the digest and the revision annotation say
		// which commit a release's chart was built from
		// (ingest.ReleaseStatus); the source annotation, the repository.
		if m, ok := artifact["metadata"].(map[string]any); ok && len(sk.ArtifactMetadata) > 0 {
			kept := pick(m, sk.ArtifactMetadata...)
			if _, ok := kept[flux.OCIRevisionMetadata]; ok {
				maps.Copy(a, pick(artifact, "digest"))
			}
			if len(kept) > 0 {
				a["metadata"] = kept
			}
		}
		slim["status"] = map[string]any{"artifact": a}
	}
	src := sk.New().(sourcev1.Source)
	return src, fromSlim(u, slim, src)
}

// fromSlim fills obj with slim (its spec, its status) and u's metadata as
// the informers need it. An object that does not convert is left with its
// metadata alone, cached by name: a layer with no source, a source with no
// artifact, until it changes.
func fromSlim(u *unstructured.Unstructured, slim map[string]any, obj runtime.Object) error {
	slim["apiVersion"], slim["kind"], slim["metadata"] = u.GetAPIVersion(), u.GetKind(), slimMetadata(u)
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(slim, obj)
	if err != nil {
		reflect.ValueOf(obj).Elem().SetZero()
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": slimMetadata(u)}, obj)
	}
	return err
}

// slimMetadata is the part of an object's metadata the informers need.
func slimMetadata(u *unstructured.Unstructured) map[string]any {
	md, _ := u.Object["metadata"].(map[string]any)
	return pick(md, "name", "namespace", "uid", "resourceVersion", "generation")
}

// pick copies keys of m that are there; absent ones stay absent.
func pick(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
