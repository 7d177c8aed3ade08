package flux

import (
	"encoding/json"
	"net/mail"
	"strings"
	"time"
	"unicode"

	"github.com/fluxcd/pkg/apis/acl"
	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
)

// Event is what notification-controller posts: the union of the event
// v1beta1 and v1 shapes of github.com/fluxcd/pkg/apis/event (v1 adds action
// and relatedObject). It is not that module's type because its timestamp
// and references are Kubernetes types that only encoding/json's reflection
// decodes, and the plain decoder below is what keeps decoding cheap; a test
// holds the two to the same JSON (TestEventIsFluxEvent). Decoding ignores
// unknown fields, so a newer Flux that adds one does not break delivery.
type Event struct {
	InvolvedObject      ObjectRef         `json:"involvedObject"`
	RelatedObject       *ObjectRef        `json:"relatedObject,omitempty"`
	Severity            string            `json:"severity"`
	Timestamp           string            `json:"timestamp"`
	Message             string            `json:"message"`
	Reason              string            `json:"reason"`
	Action              string            `json:"action,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	ReportingController string            `json:"reportingController,omitempty"`
	ReportingInstance   string            `json:"reportingInstance,omitempty"`
}

// ObjectRef is the part of a Kubernetes ObjectReference Flux fills in.
type ObjectRef struct {
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid,omitempty"`
	APIVersion      string `json:"apiVersion,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// FieldError names the field of an event that is missing or malformed.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Decoded is a validated event with its metadata normalised.
type Decoded struct {
	Event
	At        time.Time // Flux's timestamp
	Cluster   string    // metadata "cluster", or "" when absent
	Revision  string    // metadata "revision", as sent
	Origin    string    // metadata "originRevision", as sent
	Rev       Revision  // Revision parsed; zero when absent
	OriginRev Revision  // Origin parsed; zero when absent
	MailTo    []string  // metadata "mail_to": addresses an Alert routes the event to
	Commit    string    // of a HelmRelease: the commit its annotation or its chart names (NamedCommit, ChartCommit)
}

// Decode parses and validates one event body. Errors are *FieldError for
// anything a client must fix, naming the field.
func Decode(body []byte) (Decoded, error) {
	var d Decoded
	if !decodePlain(body, &d.Event) {
		d.Event = Event{} // what decodePlain filled in before it gave up
		if err := json.Unmarshal(body, &d.Event); err != nil {
			return Decoded{}, &FieldError{Field: "body", Reason: "not a JSON event: " + trimErr(err)}
		}
	}
	if err := d.validate(); err != nil {
		return Decoded{}, err
	}
	return d, nil
}

func (d *Decoded) validate() error {
	o := d.InvolvedObject
	for _, f := range []struct{ name, val string }{
		{"involvedObject.kind", o.Kind},
		{"involvedObject.namespace", o.Namespace},
		{"involvedObject.name", o.Name},
	} {
		if f.val == "" {
			return &FieldError{Field: f.name, Reason: "required"}
		}
		if !validName(f.val) {
			return &FieldError{Field: f.name, Reason: "must be 1-253 printable characters without '/' or spaces"}
		}
	}
	if d.Timestamp == "" {
		return &FieldError{Field: "timestamp", Reason: "required"}
	}
	at, err := time.Parse(time.RFC3339, d.Timestamp)
	if err != nil {
		return &FieldError{Field: "timestamp", Reason: "must be RFC 3339"}
	}
	if at.IsZero() {
		// 0001-01-01T00:00:00Z is Go's "no time" (and is what a missing
		// one decodes as): never an event's. The fuzzer found it.
		return &FieldError{Field: "timestamp", Reason: "must not be the zero time"}
	}
	d.At = at.UTC()
	ociChart := false // an OCI chart's release: its version names a digest, no commit
	for k, v := range d.Metadata {
		switch metaKey(k) {
		case eventv1beta1.MetaRevisionKey:
			d.Revision = v
		case eventv1beta1.MetaOriginRevisionKey:
			d.Origin = v
		case "cluster":
			d.Cluster = v
		case MetaCommitKey:
			d.Commit = NamedCommit(v)
		case MetaOCIDigestKey:
			ociChart = true
		case "mail_to":
			for _, a := range strings.Split(v, ",") {
				if a = strings.TrimSpace(a); a == "" {
					continue
				}
				addr, err := mail.ParseAddress(a)
				if err != nil {
					return &FieldError{Field: "metadata.mail_to", Reason: "not a comma list of mail addresses"}
				}
				d.MailTo = append(d.MailTo, addr.Address)
			}
		}
	}
	if d.Cluster != "" && !validName(d.Cluster) {
		return &FieldError{Field: "metadata.cluster", Reason: "must be 1-253 printable characters without '/' or spaces"}
	}
	if o.Kind == KindKustomization && d.Revision == "" {
		return &FieldError{Field: "metadata.revision", Reason: "required for Kustomization events"}
	}
	if o.Kind != KindKustomization && !IsSource(o.Kind) {
		// Other kinds (HelmRelease: chart versions) have their own revision
		// forms: kept as they are, never parsed as a source's.
		rollback := d.Reason == ReasonRollbackSucceeded || d.Reason == ReasonRollbackFailed
		if d.Commit == "" && o.Kind == KindHelmRelease && !ociChart && !rollback {
			d.Commit = ChartCommit(d.Revision)
		}
		return nil
	}
	if d.Revision != "" {
		if d.Rev, err = ParseRevision(d.Revision); err != nil {
			return &FieldError{Field: "metadata.revision", Reason: err.Error()}
		}
	}
	if d.Origin != "" {
		if d.OriginRev, err = ParseRevision(d.Origin); err != nil {
			return &FieldError{Field: "metadata.originRevision", Reason: err.Error()}
		}
	}
	return nil
}

// metaKey strips the API group prefix older controllers put on metadata keys
// ("kustomize.toolkit.fluxcd.io/revision"); notification-controller strips it
// itself since v0.x, but captured payloads and other senders still have it.
func metaKey(k string) string {
	if i := strings.LastIndexByte(k, '/'); i >= 0 && strings.HasSuffix(k[:i], ".toolkit.fluxcd.io") {
		return k[i+1:]
	}
	return k
}

func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// Reasons kustomize-controller and source-controller emit that carry meaning
// beyond their severity: Flux's own constants (fluxcd/pkg/apis/meta).
const (
	ReasonProgressing             = meta.ProgressingReason
	ReasonReconciliationSucceeded = meta.ReconciliationSucceededReason
	ReasonDependencyNotReady      = meta.DependencyNotReadyReason
	ReasonHealthCheckCanceled     = meta.HealthCheckCanceledReason
	ReasonPruneFailed             = meta.PruneFailedReason
	ReasonHealthCheckFailed       = meta.HealthCheckFailedReason
	ReasonReconciliationFailed    = meta.ReconciliationFailedReason
	ReasonBuildFailed             = meta.BuildFailedReason
	ReasonArtifactFailed          = meta.ArtifactFailedReason
	ReasonInvalidCELExpression    = meta.InvalidCELExpressionReason
	ReasonFeatureGateDisabled     = meta.FeatureGateDisabledReason
	// kustomize-controller's for a denied cross-namespace reference.
	ReasonAccessDenied = acl.AccessDeniedReason
	// source-controller's event reason for a new artifact: no Flux API
	// module exports it (it is a literal in the controller).
	ReasonNewArtifact = "NewArtifact"
)

// Severities of an event: Flux's own (trace is never sent to a Provider).
const (
	SeverityInfo  = eventv1beta1.EventSeverityInfo
	SeverityError = eventv1beta1.EventSeverityError
)

// ProgressReason reports whether reason is one of the reasons of progress
// this service reads (none a failure; ingest classes those).
func ProgressReason(reason string) bool {
	switch reason {
	case "", ReasonProgressing, ReasonReconciliationSucceeded, ReasonDependencyNotReady,
		ReasonHealthCheckCanceled, ReasonNewArtifact,
		ReasonInstallSucceeded, ReasonUpgradeSucceeded, ReasonTestSucceeded, ReasonRollbackSucceeded,
		ReasonUninstallSucceeded, ReasonDriftDetected, ReasonDriftCorrected:
		return true
	}
	return false
}

// HealthCheckPassed reports whether a Kustomization event says its health
// checks passed: kustomize-controller's Progressing "Health check passed
// in 2.1s", sent before the success.
func HealthCheckPassed(reason, msg string) bool {
	return reason == ReasonProgressing && strings.HasPrefix(msg, "Health check passed")
}

// CommitSubject extracts the commit subject from source-controller's
// NewArtifact message: "stored artifact for commit '<subject>'".
func CommitSubject(reason, msg string) string {
	if reason != ReasonNewArtifact {
		return ""
	}
	const lead = "stored artifact for commit '"
	i := strings.Index(msg, lead)
	if i < 0 {
		return ""
	}
	s := msg[i+len(lead):]
	if j := strings.LastIndexByte(s, '\''); j >= 0 {
		s = s[:j]
	}
	return strings.TrimSpace(s)
}
