// Package ingest is the one place that turns what Flux says into
// observations: the events notification-controller forwards (webhook) and
// the status kustomize- and helm-controller write (cluster reader) go
// through the same classification into rollout signals and failure
// classes; it also says which releases a layer's apply holds, which commit
// a release names, what helm-controller did after a failure, and each
// emitter's role.
package ingest

import (
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Signal classifies what an event of a Kustomization or a source says
// about its object's progress on a revision; 0 when nothing.
func Signal(kind, reason, severity string) rollout.Signal {
	if flux.IsSource(kind) {
		// A source event with a revision is the earliest sign of it; source
		// errors concern fetching, not the rollout of any revision.
		if severity == flux.SeverityError {
			return 0
		}
		return rollout.SignalArtifact
	}
	if kind == flux.KindHelmRelease {
		return releaseSignal(reason, severity)
	}
	if kind != flux.KindKustomization {
		return 0
	}
	switch {
	case reason == flux.ReasonDependencyNotReady:
		return rollout.SignalWaiting
	case reason == flux.ReasonHealthCheckCanceled:
		return rollout.SignalCanceled
	case failing(reason) || severity == flux.SeverityError:
		return rollout.SignalFailed
	case reason == flux.ReasonReconciliationSucceeded:
		return rollout.SignalSucceeded
	default:
		return rollout.SignalProgressing
	}
}

// releaseSignal classes what a HelmRelease's event says of the release
// of its latest spec: released (an install, upgrade or test succeeded),
// failed, remediated (a rollback or uninstall after a failure: the
// failure stands), or waiting on a dependency. Drift is the release's life
// after its rollout: it does not judge one.
func releaseSignal(reason, severity string) rollout.Signal {
	switch reason {
	case flux.ReasonInstallSucceeded, flux.ReasonUpgradeSucceeded, flux.ReasonTestSucceeded:
		return rollout.SignalSucceeded
	case flux.ReasonRollbackSucceeded, flux.ReasonUninstallSucceeded:
		return rollout.SignalProgressing
	case flux.ReasonDependencyNotReady:
		return rollout.SignalWaiting
	case flux.ReasonHealthCheckCanceled:
		return rollout.SignalCanceled
	case flux.ReasonDriftDetected, flux.ReasonDriftCorrected, flux.ReasonDriftCorrectionFailed:
		return 0
	}
	if failing(reason) || severity == flux.SeverityError {
		return rollout.SignalFailed
	}
	return 0
}

// Event translates a decoded event into an observation; false when the
// event says nothing about a revision's progress. A release's event names
// its chart's version, no revision of a source: the model gives it the
// revision whose apply changed the release (a layer's Holds, which the
// layer's Progressing event names), or the commit its chart's version or
// its annotation names (Commit).
func Event(d flux.Decoded) (rollout.Observation, bool) {
	kind := d.InvolvedObject.Kind
	sig := Signal(kind, d.Reason, d.Severity)
	release := kind == flux.KindHelmRelease
	if sig == 0 || d.Revision == "" && !release {
		return rollout.Observation{}, false
	}
	o := rollout.Observation{
		Cluster: d.Cluster,
		Emitter: Emitter(kind, d.InvolvedObject.Namespace, d.InvolvedObject.Name),
		At:      d.At,
		Signal:  sig,
		Reason:  d.Reason,
		Message: d.Message,
		MailTo:  d.MailTo,
	}
	if release {
		o.Commit = d.Commit
		if s, ok := RemediationStep(d.Reason, d.Message, d.At); ok {
			o.Remedy = &rollout.Remedy{Steps: []rollout.Step{s}}
		}
	} else {
		o.Revision, o.Hash = d.Rev.String(), d.Rev.Hash
	}
	if kind == flux.KindKustomization {
		for _, c := range flux.ChangedObjects(d.Reason, d.Message, flux.KindHelmRelease) {
			o.Holds = append(o.Holds, Emitter(c.Kind, c.Namespace, c.Name))
		}
	}
	if d.Origin != "" {
		o.Origin, o.OriginHash = d.OriginRev.String(), d.OriginRev.Hash
	}
	if sig == rollout.SignalArtifact {
		o.Subject = flux.CommitSubject(d.Reason, d.Message)
	}
	if sig == rollout.SignalFailed {
		o.Class = FailureClass(d.Reason)
	}
	o.Objects = pruneObjects(d.Reason, d.Message)
	o.Healthy = sig == rollout.SignalProgressing && flux.HealthCheckPassed(d.Reason, d.Message)
	return o, true
}

// failing reports whether reason fails a revision whatever the event's
// severity says: the reasons FailureClass classes.
func failing(reason string) bool { return FailureClass(reason) != rollout.FailureOther }

// KnownReason reports whether reason is one of Flux's this service reads:
// a reason of progress, or of failure.
func KnownReason(reason string) bool { return flux.ProgressReason(reason) || failing(reason) }

// FailureClass is the class of a failure by Flux's reason for it: the one
// place that reads Flux's failure reasons for what they mean.
func FailureClass(reason string) rollout.FailureClass {
	switch reason {
	case flux.ReasonPruneFailed:
		return rollout.FailurePrune
	case flux.ReasonHealthCheckFailed:
		return rollout.FailureHealth
	case flux.ReasonBuildFailed:
		return rollout.FailureBuild
	case flux.ReasonReconciliationFailed:
		return rollout.FailureApply
	case flux.ReasonAccessDenied:
		return rollout.FailureAccess
	case flux.ReasonArtifactFailed:
		return rollout.FailureArtifact
	case flux.ReasonInvalidCELExpression, flux.ReasonFeatureGateDisabled, flux.ReasonValuesError:
		return rollout.FailureConfig
	case flux.ReasonInstallFailed, flux.ReasonUpgradeFailed, flux.ReasonRollbackFailed, flux.ReasonUninstallFailed:
		return rollout.FailureRelease
	case flux.ReasonTestFailed:
		return rollout.FailureTest
	}
	return rollout.FailureOther
}

// pruneObjects are the objects a PruneFailed message names.
func pruneObjects(reason, msg string) []rollout.Object {
	if reason != flux.ReasonPruneFailed {
		return nil
	}
	var out []rollout.Object
	for _, p := range flux.ParsePruneMessage(msg) {
		out = append(out, rollout.Object{Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, Error: p.Error})
	}
	return out
}
