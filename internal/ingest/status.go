package ingest

import (
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// condition is the part of a status condition the reader uses.
type condition struct {
	Status          metav1.ConditionStatus
	Reason, Message string
	At              time.Time
}

func readyCondition(u *unstructured.Unstructured) (condition, bool) {
	return statusCondition(u, meta.ReadyCondition)
}

func statusCondition(u *unstructured.Unstructured, typ string) (condition, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		at, _ := time.Parse(time.RFC3339, str("lastTransitionTime"))
		return condition{Status: metav1.ConditionStatus(str("status")), Reason: str("reason"), Message: str("message"), At: at.UTC()}, true
	}
	return condition{}, false
}

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
func Status(k *unstructured.Unstructured, cluster, waitingFor string) []rollout.Observation {
	em := rollout.Emitter{Kind: rollout.KindLayer, Namespace: k.GetNamespace(), Name: k.GetName()}
	var out []rollout.Observation
	add := func(rev string, at time.Time, sig rollout.Signal, reason, msg string) *rollout.Observation {
		r, err := flux.ParseRevision(rev)
		if err != nil || at.IsZero() {
			return nil
		}
		out = append(out, rollout.Observation{
			Cluster: cluster, Emitter: em, Revision: r.String(), Hash: r.Hash,
			At: at, Signal: sig, Reason: reason, Message: msg,
		})
		return &out[len(out)-1]
	}
	applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
	attempted, _, _ := unstructured.NestedString(k.Object, "status", "lastAttemptedRevision")
	observed, _, _ := unstructured.NestedInt64(k.Object, "status", "observedGeneration")
	if ready, ok := readyCondition(k); ok {
		switch sig := Signal(flux.KindKustomization, ready.Reason, severity(ready)); {
		case ready.Status == metav1.ConditionTrue && ready.Reason == flux.ReasonReconciliationSucceeded && observed == k.GetGeneration():
			add(applied, ready.At, rollout.SignalSucceeded, ready.Reason, ready.Message)
		case sig == rollout.SignalWaiting:
			add(waitingFor, ready.At, rollout.SignalWaiting, ready.Reason, ready.Message)
		case ready.Status == metav1.ConditionFalse && sig == rollout.SignalFailed:
			if o := add(attempted, ready.At, rollout.SignalFailed, ready.Reason, ready.Message); o != nil {
				o.Objects = pruneObjects(ready.Reason, ready.Message)
			}
		case ready.Status == metav1.ConditionFalse && sig == rollout.SignalCanceled:
			add(attempted, ready.At, rollout.SignalCanceled, ready.Reason, ready.Message)
		case ready.Status == metav1.ConditionUnknown:
			if rec, ok := statusCondition(k, meta.ReconcilingCondition); ok && rec.Status == metav1.ConditionTrue {
				if rev := reconcilingRevision(rec.Message); rev != "" {
					add(rev, ready.At, rollout.SignalProgressing, ready.Reason, rec.Message)
				}
			}
		}
	}
	history, _, _ := unstructured.NestedSlice(k.Object, "status", "history")
	for _, h := range history {
		m, _ := h.(map[string]any)
		if m["lastReconciledStatus"] != flux.ReasonReconciliationSucceeded {
			continue
		}
		md, _ := m["metadata"].(map[string]any)
		rev, _ := md["revision"].(string)
		ts, _ := m["lastReconciled"].(string)
		at, _ := time.Parse(time.RFC3339, ts)
		add(rev, at.UTC(), rollout.SignalSucceeded, flux.ReasonReconciliationSucceeded, "Applied (status.history)")
	}
	return out
}

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
func severity(c condition) string {
	if c.Status == metav1.ConditionFalse {
		return flux.SeverityError
	}
	return flux.SeverityInfo
}
