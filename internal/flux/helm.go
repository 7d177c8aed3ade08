package flux

import (
	"strconv"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
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

// What names the commit a release's chart was built from, when the
// HelmRelease's spec does not change with it:
//   - source-controller versions a chart it builds from a Git (or Bucket)
//     source with reconcileStrategy Revision "<version>+<the first 12 hex
//     of the commit>" (its HelmChart reconciler); an OCI chart's version
//     ends in "+<12 hex of its digest>" instead, which names no commit;
//   - an annotation event.toolkit.fluxcd.io/commit on the HelmRelease, which
//     every event of it carries in its metadata as "commit" (RFC-0008);
//   - an OCI chart's artifact annotation org.opencontainers.image.revision,
//     set by whoever pushed it (flux push artifact: "<branch>@sha1:<hex>").
const (
	MetaCommitKey = "commit"
	// MetaOCIDigestKey is in the metadata of an OCI chart's release events
	// (a literal in helm-controller's reconcile package): their version's
	// "+<12 hex>" is the digest's.
	MetaOCIDigestKey    = "oci-digest"
	CommitAnnotation    = eventv1beta1.Group + "/" + MetaCommitKey
	OCIRevisionMetadata = "org.opencontainers.image.revision"
	// OCISourceMetadata is the repository an OCI artifact was built from
	// (flux push artifact --source): a forge shows its rollouts there.
	OCISourceMetadata = "org.opencontainers.image.source"
)

// ChartCommit is the commit a chart version's build metadata may name
// ("1.0.0+ba5715194a63"), or "". Not an OCI chart's, nor the one a
// rollback's event gives: helm-controller's rollback remediation names
// the chart of the release it went back to (Decode).
func ChartCommit(version string) string {
	i := strings.LastIndexByte(version, '+')
	if i < 0 {
		return ""
	}
	return hexCommit(version[i+1:])
}

// NamedCommit is the commit a commit annotation or an OCI revision names,
// a hash alone or a Flux revision ("main@sha1:<hex>"), or "".
func NamedCommit(v string) string {
	if r, err := ParseRevision(v); err == nil {
		return hexCommit(r.Hash)
	}
	return hexCommit(v)
}

// hexCommit is s in lowercase when it can name a commit (IsCommit),
// or "".
func hexCommit(s string) string {
	if s = strings.ToLower(s); IsCommit(s) {
		return s
	}
	return ""
}

// What helm-controller's remediation reports, in its events and its
// Remediated condition alike (the formats of its reconcile package,
// v1.6: fmtRollbackRemediation*, fmtUninstallRemediation*): the release
// they name is "<namespace>/<name>.v<version>", a rollback's target or
// the uninstalled release. A plain uninstall (the HelmRelease deleted)
// reports UninstallSucceeded too, in other words: no remediation.
const (
	rollbackPrefix  = "Helm rollback to previous release "
	uninstallPrefix = "Helm uninstall remediation for release "
	withChart       = " with chart "
	failedSep       = " failed: "
)

// Remediation is one remediation helm-controller reported.
type Remediation struct {
	Rollback bool   // a rollback; else an uninstall
	Failed   bool   // it failed
	Version  int    // the Helm release version it names; 0 when unreadable
	Error    string // a failed one's error, its first line
}

// ParseRemediation reads a remediation from a HelmRelease's reason and
// message; false when they report none.
func ParseRemediation(reason, msg string) (Remediation, bool) {
	var r Remediation
	prefix := uninstallPrefix
	switch reason {
	case ReasonRollbackSucceeded:
		r.Rollback, prefix = true, rollbackPrefix
	case ReasonRollbackFailed:
		r.Rollback, r.Failed, prefix = true, true, rollbackPrefix
	case ReasonUninstallSucceeded:
	case ReasonUninstallFailed:
		r.Failed = true
	default:
		return Remediation{}, false
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(msg), prefix)
	if !ok {
		return Remediation{}, false
	}
	release, rest, _ := strings.Cut(rest, withChart)
	if i := strings.LastIndex(release, ".v"); i >= 0 {
		if v, err := strconv.Atoi(release[i+2:]); err == nil && v > 0 {
			r.Version = v
		}
	}
	if r.Failed {
		_, e, _ := strings.Cut(rest, failedSep)
		r.Error, _, _ = strings.Cut(e, "\n")
		r.Error = strings.TrimSpace(r.Error)
	}
	return r, true
}

// ReleaseError is what a HelmRelease's failure message says failed: its
// first line, Helm's error; helm-controller adds "Last Helm logs" after it
// (eventMessageWithLog), which the rollout page shows whole.
func ReleaseError(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	return line
}
