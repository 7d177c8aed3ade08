package flux

import (
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons helm-controller's events give (its API's constants; the drift
// corrections are literals in the controller, exported by no module).
const (
	ReasonInstallSucceeded      = helmv2.InstallSucceededReason
	ReasonInstallFailed         = helmv2.InstallFailedReason
	ReasonUpgradeSucceeded      = helmv2.UpgradeSucceededReason
	ReasonUpgradeFailed         = helmv2.UpgradeFailedReason
	ReasonTestSucceeded         = helmv2.TestSucceededReason
	ReasonTestFailed            = helmv2.TestFailedReason
	ReasonRollbackSucceeded     = helmv2.RollbackSucceededReason
	ReasonRollbackFailed        = helmv2.RollbackFailedReason
	ReasonUninstallSucceeded    = helmv2.UninstallSucceededReason
	ReasonUninstallFailed       = helmv2.UninstallFailedReason
	ReasonDriftDetected         = helmv2.DriftDetectedReason
	ReasonDriftCorrected        = "DriftCorrected"
	ReasonDriftCorrectionFailed = "DriftCorrectionFailed"
	ReasonValuesError           = "ValuesError"
)

// What kustomize-controller leaves on every object its apply manages: its
// owner labels (fluxcd/pkg/ssa SetOwnerLabels, under its API group), and
// its server-side-apply field manager, its controller name (a literal in
// its main package), whose time on an object is when its apply last
// changed it (the kube-apiserver moves it only then).
var (
	OwnerNameLabel      = kustomizev1.GroupVersion.Group + "/name"
	OwnerNamespaceLabel = kustomizev1.GroupVersion.Group + "/namespace"
)

const kustomizeFieldManager = "kustomize-controller"

// AppliedByKustomize reports whether a managed-fields entry is
// kustomize-controller's apply.
func AppliedByKustomize(mf metav1.ManagedFieldsEntry) bool {
	return mf.Manager == kustomizeFieldManager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Time != nil
}

// The actions of kustomize-controller's change set lines that changed an
// object (fluxcd/pkg/ssa CreatedAction and ConfiguredAction; that module is
// kustomize-controller's machinery, too heavy to import for two words).
const (
	actionCreated    = "created"
	actionConfigured = "configured"
)

// ChangedObject is an object a layer's apply created or changed, as its
// Progressing event names it.
type ChangedObject struct {
	Kind, Namespace, Name string
}

// ChangedObjects are the objects of kind a Progressing event of a
// Kustomization says its apply created or configured: one line each,
// "Kind/namespace/name action" (the change set kustomize-controller
// emits; deletions and unchanged objects are not changes to follow).
func ChangedObjects(reason, msg, kind string) []ChangedObject {
	if reason != ReasonProgressing || !strings.Contains(msg, kind+"/") {
		return nil
	}
	var out []ChangedObject
	for line := range strings.SplitSeq(msg, "\n") {
		subject, action, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || action != actionCreated && action != actionConfigured {
			continue
		}
		k, rest, ok := strings.Cut(subject, "/")
		if !ok || k != kind {
			continue
		}
		ns, name, ok := strings.Cut(rest, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			continue
		}
		out = append(out, ChangedObject{k, ns, name})
	}
	return out
}
