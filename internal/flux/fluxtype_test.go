package flux

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jsonNames lists the JSON names of t's fields, in order.
func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// TestEventIsFluxEvent holds Event, a copy for the plain decoder, to the
// types notification-controller marshals: the v1beta1 event it sends today
// and the v1 event (action, relatedObject) a newer one may. A field Flux
// adds to either fails here first, and every field of both decodes to what
// Flux put in it, on the plain path.
func TestEventIsFluxEvent(t *testing.T) {
	v1 := jsonNames(reflect.TypeFor[eventv1.Event]())
	if got := jsonNames(reflect.TypeFor[Event]()); !slices.Equal(got, v1) {
		t.Errorf("Event has the JSON fields %q, Flux's event/v1 %q", got, v1)
	}
	for _, name := range jsonNames(reflect.TypeFor[eventv1beta1.Event]()) {
		if !slices.Contains(v1, name) {
			t.Errorf("Flux's event/v1beta1 has %q, which event/v1 (and Event) lacks", name)
		}
	}
	// fieldPath names a field within an object; Flux refers to whole objects.
	ref := slices.DeleteFunc(jsonNames(reflect.TypeFor[corev1.ObjectReference]()), func(n string) bool { return n == "fieldPath" })
	if got := jsonNames(reflect.TypeFor[ObjectRef]()); !slices.Equal(got, ref) {
		t.Errorf("ObjectRef has the JSON fields %q, an ObjectReference %q", got, ref)
	}

	at := time.Date(2026, 11, 30, 10, 15, 30, 0, time.UTC)
	involved := corev1.ObjectReference{Kind: KindKustomization, Namespace: "flux-system", Name: "apps",
		UID: "7d0cdc51-ddcf-4743-b223-83ca5c699632", APIVersion: "kustomize.toolkit.fluxcd.io/v1", ResourceVersion: "123456"}
	related := corev1.ObjectReference{Kind: KindGitRepository, Namespace: "flux-system", Name: "flux-system",
		UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", APIVersion: "source.toolkit.fluxcd.io/v1", ResourceVersion: "654321"}
	metadata := map[string]string{
		eventv1.MetaRevisionKey:       "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1",
		eventv1.MetaOriginRevisionKey: "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
		"cluster":                     "prod",
		"mail_to":                     "ops@example.com",
	}
	want := Decoded{
		Event: Event{
			InvolvedObject: ObjectRef{Kind: KindKustomization, Namespace: "flux-system", Name: "apps",
				UID: "7d0cdc51-ddcf-4743-b223-83ca5c699632", APIVersion: "kustomize.toolkit.fluxcd.io/v1", ResourceVersion: "123456"},
			Severity: SeverityError, Timestamp: "2026-11-30T10:15:30Z",
			Message: "delete failed, errors: ConfigMap/apps/old-config delete failed: forbidden;",
			Reason:  ReasonPruneFailed, Metadata: metadata,
			ReportingController: "kustomize-controller", ReportingInstance: "kustomize-controller-7c7b47f5f-8bhrp",
		},
		At: at, Cluster: "prod", MailTo: []string{"ops@example.com"},
		Revision: metadata[eventv1.MetaRevisionKey], Origin: metadata[eventv1.MetaOriginRevisionKey],
	}
	want.Rev, _ = ParseRevision(want.Revision)
	want.OriginRev, _ = ParseRevision(want.Origin)
	withV1 := want
	withV1.RelatedObject = &ObjectRef{Kind: KindGitRepository, Namespace: "flux-system", Name: "flux-system",
		UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", APIVersion: "source.toolkit.fluxcd.io/v1", ResourceVersion: "654321"}
	withV1.Action = eventv1.ActionApplying

	for _, tt := range []struct {
		name string
		sent any
		want Decoded
	}{
		{"v1beta1", eventv1beta1.Event{InvolvedObject: involved, Severity: eventv1beta1.EventSeverityError,
			Timestamp: metav1.NewTime(at), Message: want.Message, Reason: want.Reason, Metadata: metadata,
			ReportingController: want.ReportingController, ReportingInstance: want.ReportingInstance}, want},
		{"v1", eventv1.Event{InvolvedObject: involved, RelatedObject: &related, Severity: eventv1.EventSeverityError,
			Timestamp: metav1.NewTime(at), Message: want.Message, Reason: want.Reason, Action: eventv1.ActionApplying,
			Metadata: metadata, ReportingController: want.ReportingController, ReportingInstance: want.ReportingInstance}, withV1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(tt.sent)
			if err != nil {
				t.Fatal(err)
			}
			if !sameAsJSON(t, body) {
				t.Errorf("decodePlain did not take %s", body)
			}
			got, err := Decode(body)
			if err != nil {
				t.Fatalf("Decode(%s): %v", body, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%s):\n got %#v\nwant %#v", body, got, tt.want)
			}
		})
	}
}
