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
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
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

// slimRelease is a HelmRelease as cached: what ingest.ReleaseStatus,
// ingest.ReleaseHold, ingest.Follows and the owner index read. Its spec
// but the chart's source (values, often large), its inventory and all but
// the newest history entry are left out; of its managed fields,
// kustomize-controller's apply time alone; of its annotations, the commit.
func slimRelease(u *unstructured.Unstructured) (*helmv2.HelmRelease, error) {
	md := slimMetadata(u)
	labels := map[string]any{}
	for _, k := range []string{flux.OwnerNameLabel, flux.OwnerNamespaceLabel} {
		if v, ok := u.GetLabels()[k]; ok {
			labels[k] = v
		}
	}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	for _, mf := range u.GetManagedFields() {
		if flux.AppliedByKustomize(mf) {
			md["managedFields"] = []any{map[string]any{"manager": mf.Manager, "operation": string(mf.Operation),
				"time": mf.Time.UTC().Format(time.RFC3339)}}
		}
	}
	if c, ok := u.GetAnnotations()[flux.CommitAnnotation]; ok {
		md["annotations"] = map[string]any{flux.CommitAnnotation: c}
	}
	status, _ := u.Object["status"].(map[string]any)
	st := pick(status, "observedGeneration", "lastAttemptedGeneration", "lastAttemptedRevision", "lastAttemptedRevisionDigest",
		"lastAttemptedReleaseAction", "installFailures", "upgradeFailures")
	if conds, ok := status["conditions"].([]any); ok {
		var kept []any
		for _, c := range conds {
			switch m, _ := c.(map[string]any); m["type"] {
			case meta.ReadyCondition, helmv2.ReleasedCondition, helmv2.RemediatedCondition, meta.StalledCondition:
				kept = append(kept, m)
			}
		}
		st["conditions"] = kept
	}
	if history, ok := status["history"].([]any); ok && len(history) > 0 {
		if m, ok := history[0].(map[string]any); ok {
			st["history"] = []any{pick(m, "lastDeployed")}
		}
	}
	// The chart's source: whether the chart follows a layer's source
	// (ingest.Follows), and the OCI chart whose artifact names a commit.
	spec, _ := u.Object["spec"].(map[string]any)
	sp := pick(spec, "chartRef")
	if chart, ok := spec["chart"].(map[string]any); ok {
		cs, _ := chart["spec"].(map[string]any)
		sp["chart"] = map[string]any{"spec": pick(cs, "chart", "sourceRef", "reconcileStrategy")}
	}
	slim := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": md, "spec": sp, "status": st}
	hr := &helmv2.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(slim, hr); err != nil {
		*hr = helmv2.HelmRelease{}
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": slimMetadata(u)}, hr)
		return hr, err
	}
	return hr, nil
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
