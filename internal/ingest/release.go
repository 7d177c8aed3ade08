package ingest

import (
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// What the cluster says of a HelmRelease, read from its status the way
// helm-controller writes it, and tied to the apply of its spec by
// kustomize-controller's field manager (docs/verdicts.md, "Releases
// inside a layer").

// Owner is the Kustomization that applies a HelmRelease: the labels
// kustomize-controller's apply puts on every object it manages
// (fluxcd/pkg/ssa SetOwnerLabels, under its API group); false for a
// HelmRelease no Kustomization applied.
func Owner(hr *helmv2.HelmRelease) (namespace, name string, ok bool) {
	name, namespace = hr.Labels[flux.OwnerNameLabel], hr.Labels[flux.OwnerNamespaceLabel]
	return namespace, name, name != "" && namespace != ""
}

// Applied is when kustomize-controller's apply last changed the
// HelmRelease: the time of its server-side-apply field manager, which the
// kube-apiserver moves only when an apply changes the object; zero when
// it never applied it.
func Applied(hr *helmv2.HelmRelease) time.Time {
	var at time.Time
	for _, mf := range hr.ManagedFields {
		if flux.AppliedByKustomize(mf) && mf.Time.After(at) {
			at = mf.Time.UTC()
		}
	}
	// At the precision of the events' times, which the holds it is
	// compared with come from.
	return at.Truncate(time.Second)
}

// ReleaseStatus is what a HelmRelease's status says of the spec
// kustomize-controller last applied, as an observation attributed by
// that apply (Applied): released when helm-controller's last attempt was
// for the current generation and it is Ready; failed when that attempt
// failed, with the Released condition's message (Helm's error) and what
// remediation did after it (a rollback, or retries exhausted); waiting
// on a dependency; otherwise still progressing. False when no
// Kustomization applied it.
//
// When the commit of what helm-controller attempted is known (Commit: the
// HelmRelease's commit annotation; the chart's version, built from the
// commit; the OCI chart's revision annotation, chart being the
// OCIRepository its chartRef names), the observations name it, and the
// layer: the commit, not the apply, says which rollout they are about.
func ReleaseStatus(hr *helmv2.HelmRelease, cluster string, chart sourcev1.Source) []rollout.Observation {
	applied := Applied(hr)
	ns, name, ok := Owner(hr)
	if !ok || applied.IsZero() {
		return nil
	}
	st := &hr.Status
	em := Emitter(flux.KindHelmRelease, hr.Namespace, hr.Name)
	ready := apimeta.FindStatusCondition(st.Conditions, meta.ReadyCondition)
	attempted := ready != nil && st.LastAttemptedGeneration >= hr.Generation && st.ObservedGeneration >= hr.Generation
	commit := flux.NamedCommit(hr.Annotations[flux.CommitAnnotation])
	if commit == "" && attempted {
		commit = attemptedCommit(hr, chart)
	}
	obs := func(sig rollout.Signal, at time.Time, reason, msg string) rollout.Observation {
		if at.Before(applied) {
			at = applied
		}
		o := rollout.Observation{Cluster: cluster, Emitter: em, At: at.UTC().Truncate(time.Second), Signal: sig,
			Reason: reason, Message: msg, Applied: applied, Status: true, Commit: commit}
		if commit != "" {
			o.Layer = Layer(ns, name)
		}
		return o
	}
	if !attempted {
		return []rollout.Observation{obs(rollout.SignalPending, applied, meta.ProgressingReason, "helm-controller has not acted on this spec yet")}
	}
	at := ready.LastTransitionTime.Time
	released := apimeta.FindStatusCondition(st.Conditions, helmv2.ReleasedCondition)
	switch sig := releaseSignal(ready.Reason, severity(ready)); {
	case ready.Status == metav1.ConditionTrue:
		reason := ready.Reason
		if released != nil && released.Status == metav1.ConditionTrue {
			reason = released.Reason
		}
		if h := st.History.Latest(); h != nil && h.LastDeployed.After(at) {
			at = h.LastDeployed.Time
		}
		return []rollout.Observation{obs(rollout.SignalSucceeded, at, reason, ready.Message)}
	case ready.Status == metav1.ConditionFalse && sig == rollout.SignalFailed || released != nil && released.Status == metav1.ConditionFalse:
		reason, msg := ready.Reason, ready.Message
		if released != nil && released.Status == metav1.ConditionFalse {
			reason, msg = released.Reason, released.Message
		}
		o := obs(rollout.SignalFailed, at, reason, msg)
		o.Class = FailureClass(reason) // as its event's: one class a reason
		o.Remedy = statusRemedy(hr)
		return []rollout.Observation{o}
	case sig == rollout.SignalWaiting:
		return []rollout.Observation{obs(rollout.SignalWaiting, at, ready.Reason, ready.Message)}
	}
	return []rollout.Observation{obs(rollout.SignalProgressing, at, ready.Reason, ready.Message)}
}

// ReleaseHold is the hold a layer's apply made of a HelmRelease, read from
// the cluster when no event said it (notification-controller down): the
// layer's revision whose first reconciliation came first at or after the
// apply that last changed it (status.history: kustomize-controller records
// a revision when its reconciliation ends, after its apply); false when
// the history has none yet, or the layer is not the release's owner.
func ReleaseHold(hr *helmv2.HelmRelease, k *kustomizev1.Kustomization, cluster string) (rollout.Observation, bool) {
	applied := Applied(hr)
	ns, name, ok := Owner(hr)
	if !ok || applied.IsZero() || ns != k.Namespace || name != k.Name {
		return rollout.Observation{}, false
	}
	applied = applied.Truncate(time.Second)
	var rev string
	var first time.Time
	for _, h := range k.Status.History {
		f := h.FirstReconciled.UTC()
		if f.Before(applied) || !first.IsZero() && !f.Before(first) {
			continue
		}
		if r := h.Metadata[historyRevisionKey]; r != "" {
			rev, first = r, f
		}
	}
	r, err := flux.ParseRevision(rev)
	if err != nil {
		return rollout.Observation{}, false
	}
	return rollout.Observation{
		Cluster: cluster, Emitter: Layer(k.Namespace, k.Name), Revision: r.String(), Hash: r.Hash, At: applied,
		Signal: rollout.SignalProgressing, Reason: flux.ReasonProgressing,
		Message: flux.KindHelmRelease + "/" + hr.Namespace + "/" + hr.Name + " configured (read from the cluster)",
		Holds:   []rollout.Emitter{Emitter(flux.KindHelmRelease, hr.Namespace, hr.Name)},
	}, true
}

// attemptedCommit is the commit helm-controller's last attempt's chart was
// built from, as far as it says: the OCI chart's revision annotation when
// the chart's artifact is the one attempted (same digest), else the
// commit the chart's version names; "" when neither does.
func attemptedCommit(hr *helmv2.HelmRelease, chart sourcev1.Source) string {
	if chart != nil {
		if a := chart.GetArtifact(); a != nil && a.Digest != "" && a.Digest == hr.Status.LastAttemptedRevisionDigest {
			if c := flux.NamedCommit(a.Metadata[flux.OCIRevisionMetadata]); c != "" {
				return c
			}
		}
	}
	if hr.Status.LastAttemptedRevisionDigest != "" {
		return "" // an OCI chart: its version's "+<12 hex>" is the digest's
	}
	return flux.ChartCommit(hr.Status.LastAttemptedRevision)
}

// ChartSource is the OCIRepository a HelmRelease's chartRef names, whose
// artifact may say which commit the chart was built from; false for a
// chart of another kind.
func ChartSource(hr *helmv2.HelmRelease) (rollout.Emitter, bool) {
	ref := hr.Spec.ChartRef
	if ref == nil || ref.Kind != sourcev1.OCIRepositoryKind {
		return rollout.Emitter{}, false
	}
	ns := ref.Namespace
	if ns == "" {
		ns = hr.Namespace
	}
	return Emitter(ref.Kind, ns, ref.Name), true
}

// Follows reports whether a HelmRelease's chart is built from every
// revision of the source layer k applies (reconcileStrategy Revision from
// the same GitRepository or Bucket): each revision the layer applies
// changes the release, though its spec does not change.
func Follows(hr *helmv2.HelmRelease, k *kustomizev1.Kustomization) bool {
	if hr.Spec.Chart == nil {
		return false
	}
	spec := &hr.Spec.Chart.Spec
	ref := spec.SourceRef
	if spec.ReconcileStrategy != sourcev1.ReconcileStrategyRevision ||
		ref.Kind != sourcev1.GitRepositoryKind && ref.Kind != sourcev1.BucketKind {
		return false
	}
	if ref.Namespace == "" {
		ref.Namespace = hr.Namespace
	}
	return SourceOf(k) == Emitter(ref.Kind, ref.Namespace, ref.Name)
}

// statusRemedy is what a HelmRelease's status says helm-controller did
// after its last attempt of the current spec failed: the remediation its
// Remediated condition reports (there only after the failed attempt its
// failure counter counts: helm-controller deletes it before each
// attempt), how many attempts failed, and Stalled, its word that it
// stopped. Nil when it says none of these.
func statusRemedy(hr *helmv2.HelmRelease) *rollout.Remedy {
	st := &hr.Status
	r := &rollout.Remedy{}
	switch st.LastAttemptedReleaseAction {
	case helmv2.ReleaseActionInstall:
		r.Attempts = int(st.InstallFailures)
	case helmv2.ReleaseActionUpgrade:
		r.Attempts = int(st.UpgradeFailures)
	}
	if c := apimeta.FindStatusCondition(st.Conditions, helmv2.RemediatedCondition); c != nil {
		if s, ok := RemediationStep(c.Reason, c.Message, c.LastTransitionTime.Time); ok {
			r.Steps, r.Remedied = []rollout.Step{s}, r.Attempts
		}
	}
	if c := apimeta.FindStatusCondition(st.Conditions, meta.StalledCondition); c != nil && c.Status == metav1.ConditionTrue {
		r.Stalled = &rollout.Mark{At: c.LastTransitionTime.UTC().Truncate(time.Second), Signal: rollout.SignalFailed, Reason: c.Reason, Message: c.Message}
	}
	if r.Attempts == 0 && len(r.Steps) == 0 && r.Stalled == nil {
		return nil
	}
	return r
}

// RemediationStep is the remediation a HelmRelease's report (an event, or
// its Remediated condition: the same words) tells of, if any.
func RemediationStep(reason, msg string, at time.Time) (rollout.Step, bool) {
	rm, ok := flux.ParseRemediation(reason, msg)
	if !ok {
		return rollout.Step{}, false
	}
	kind := rollout.StepUninstalled
	switch {
	case rm.Rollback && rm.Failed:
		kind = rollout.StepRollbackFailed
	case rm.Rollback:
		kind = rollout.StepRolledBack
	case rm.Failed:
		kind = rollout.StepUninstallFailed
	}
	return rollout.Step{Kind: kind, Version: rm.Version, Reason: reason, Error: rm.Error, At: at.UTC().Truncate(time.Second)}, true
}
