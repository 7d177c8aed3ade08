package ingest

import (
	"strings"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Status turns a Kustomization's status into observations, by
// the rules kustomize-controller follows when it writes it:
//   - Ready True (ReconciliationSucceeded) with observedGeneration equal to
//     generation: lastAppliedRevision was applied. Flux moves the Ready
//     condition's lastTransitionTime whenever its message ("Applied
//     revision: <rev>") changes, so that time is when the revision applied.
//   - Ready False with a failure reason: lastAttemptedRevision failed, with
//     Flux's message (PruneFailed names the objects it could not delete).
//   - Ready False/Unknown with DependencyNotReady: waiting on a dependency,
//     for the revision its source has now (waitingFor).
//   - Ready False with HealthCheckCanceled: lastAttemptedRevision was left
//     for a newer revision.
//   - Ready Unknown otherwise: the revision the Reconciling condition's
//     message names ("Fetching manifests for revision <rev> with a timeout
//     of ...") is progressing. Not lastAttemptedRevision: at the start of a
//     reconciliation it still names the previous revision (seen with real
//     controllers: right after a canceled health check it named the
//     canceled one while the newer was being applied).
//   - status.history: each entry whose last reconciliation succeeded says its
//     revision had applied by lastReconciled (catch-up after downtime).
func Status(k *kustomizev1.Kustomization, cluster, waitingFor string) []rollout.Observation {
	em := Layer(k.Namespace, k.Name)
	var out []rollout.Observation
	add := func(rev string, at time.Time, sig rollout.Signal, reason, msg string) *rollout.Observation {
		r, err := flux.ParseRevision(rev)
		if err != nil || at.IsZero() {
			return nil
		}
		out = append(out, rollout.Observation{
			Cluster: cluster, Emitter: em, Revision: r.String(), Hash: r.Hash,
			At: at.UTC(), Signal: sig, Reason: reason, Message: msg,
		})
		return &out[len(out)-1]
	}
	st := &k.Status
	if ready := apimeta.FindStatusCondition(st.Conditions, meta.ReadyCondition); ready != nil {
		at := ready.LastTransitionTime.Time
		switch sig := Signal(flux.KindKustomization, ready.Reason, severity(ready)); {
		case ready.Status == metav1.ConditionTrue && ready.Reason == flux.ReasonReconciliationSucceeded && st.ObservedGeneration == k.Generation:
			add(st.LastAppliedRevision, at, rollout.SignalSucceeded, ready.Reason, ready.Message)
		case sig == rollout.SignalWaiting:
			add(waitingFor, at, rollout.SignalWaiting, ready.Reason, ready.Message)
		case ready.Status == metav1.ConditionFalse && sig == rollout.SignalFailed:
			if o := add(st.LastAttemptedRevision, at, rollout.SignalFailed, ready.Reason, ready.Message); o != nil {
				o.Class, o.Objects = FailureClass(ready.Reason), pruneObjects(ready.Reason, ready.Message)
			}
		case ready.Status == metav1.ConditionFalse && sig == rollout.SignalCanceled:
			add(st.LastAttemptedRevision, at, rollout.SignalCanceled, ready.Reason, ready.Message)
		case ready.Status == metav1.ConditionUnknown:
			if rec := apimeta.FindStatusCondition(st.Conditions, meta.ReconcilingCondition); rec != nil && rec.Status == metav1.ConditionTrue {
				if rev := reconcilingRevision(rec.Message); rev != "" {
					add(rev, at, rollout.SignalProgressing, ready.Reason, rec.Message)
				}
			}
		}
	}
	for _, h := range st.History {
		if h.LastReconciledStatus == flux.ReasonReconciliationSucceeded {
			add(h.Metadata[historyRevisionKey], h.LastReconciled.Time, rollout.SignalSucceeded, flux.ReasonReconciliationSucceeded, "Applied (status.history)")
		}
	}
	return out
}

// historyRevisionKey is the key of the revision in a status.history
// entry's metadata: a literal in kustomize-controller, exported by no Flux
// API module.
const historyRevisionKey = "revision"

// reconcilingRevision is the revision kustomize-controller names in its
// Reconciling message ("<step> for revision <rev> with a timeout of <d>"),
// or "".
func reconcilingRevision(msg string) string {
	_, rest, ok := strings.Cut(msg, " for revision ")
	if !ok {
		return ""
	}
	rev, _, _ := strings.Cut(rest, " ")
	return rev
}

// severity is what the event for a Ready condition would carry.
func severity(c *metav1.Condition) string {
	if c.Status == metav1.ConditionFalse {
		return flux.SeverityError
	}
	return flux.SeverityInfo
}
