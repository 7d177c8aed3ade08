package cluster

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// TestLayerCodec: the Kustomizations' codec decodes a Kustomization as
// Flux's type decodes it whole, but for its inventory and managed fields
// (its annotations kept: a bookmark's say when a watch's initial events
// end); a watch event's envelope; the Status of an error; and a list, an
// item that does not fit decoded as far as it fits, the others whole.
func TestLayerCodec(t *testing.T) {
	u := kustomization("apps", 40, "True", flux.ReasonReconciliationSucceeded, "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", false)
	u.SetAnnotations(map[string]string{"k8s.io/initial-events-end": "true"})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kustomize-controller", Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}})
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	codec := wireCodec{kind: layerKind(), failed: func(m metav1.Object, err error) { failed = append(failed, m.GetName()+": "+err.Error()) }}
	obj, _, err := codec.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*kustomizev1.Kustomization)
	want := whole(t, u)
	if len(want.Status.Inventory.Entries) != 40 || len(want.ManagedFields) != 1 {
		t.Fatal("the whole object has no inventory or managed fields: the case tests nothing")
	}
	want.Status.Inventory, want.ManagedFields = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n got %+v\nwant %+v", got, want)
	}

	// A watch event's envelope, then its object.
	ev := &metav1.WatchEvent{}
	if _, _, err := codec.Decode([]byte(`{"type":"MODIFIED","object":`+string(data)+`}`), nil, ev); err != nil || ev.Type != "MODIFIED" || string(ev.Object.Raw) != strings.TrimSpace(string(data)) {
		t.Fatalf("envelope %s (%v)", ev.Type, err)
	}
	if _, _, err := codec.Decode(data, nil, &kustomizev1.Kustomization{}); err == nil {
		t.Fatal("decoded into a Kustomization given")
	}

	// An error's Status (a watch's ERROR event, an error's body).
	obj, _, err = codec.Decode([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}`), nil, nil)
	if s, ok := obj.(*metav1.Status); err != nil || !ok || s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
		t.Fatalf("a Status decoded as %#v (%v)", obj, err)
	}
	if _, _, err := codec.Decode([]byte(`{"kind":"GitRepository","apiVersion":"source.toolkit.fluxcd.io/v1"}`), nil, nil); err == nil {
		t.Fatal("a GitRepository decoded as a Kustomization")
	}
	if _, _, err := codec.Decode([]byte(`{"kind":`), nil, nil); err == nil {
		t.Fatal("bytes that are not JSON decoded")
	}
	if len(failed) != 0 {
		t.Fatalf("failed %q", failed)
	}

	// A list: the same items, whole but for what is skipped.
	odd := kustomization("odd", 1, "True", flux.ReasonReconciliationSucceeded, "Applied", false)
	if err := unstructured.SetNestedField(odd.Object, "yes", "status", "observedGeneration"); err != nil {
		t.Fatal(err)
	}
	list := func(items ...*unstructured.Unstructured) []byte {
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "KustomizationList",
			"metadata": map[string]any{"resourceVersion": "777", "continue": "next"}}}
		for _, i := range items {
			l.Items = append(l.Items, *i)
		}
		b, err := l.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	other := kustomization("infra", 3, "False", flux.ReasonPruneFailed, "delete failed", false)
	for _, tt := range []struct {
		name   string
		items  []*unstructured.Unstructured
		failed int
	}{
		{"whole", []*unstructured.Unstructured{u, other}, 0},
		{"an item does not fit", []*unstructured.Unstructured{u, odd, other}, 1},
	} {
		failed = nil
		obj, err := codec.decodeList(list(tt.items...))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		l := obj.(*kustomizev1.KustomizationList)
		if l.ResourceVersion != "777" || l.Continue != "next" || len(l.Items) != len(tt.items) || len(failed) != tt.failed {
			t.Fatalf("%s: list %+v with %d items, failed %q", tt.name, l.ListMeta, len(l.Items), failed)
		}
		for i, item := range tt.items {
			data, _ := item.MarshalJSON()
			want, err := decodeLayer(data)
			if (err != nil) != (item == odd) || !reflect.DeepEqual(&l.Items[i], want) {
				t.Fatalf("%s: item %d\n got %+v\nwant %+v (%v)", tt.name, i, l.Items[i], want, err)
			}
		}
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "odd: ") {
		t.Fatalf("failed %q, want odd's", failed)
	}
}

// TestReleaseCodec: the HelmReleases' codec decodes a HelmRelease as
// Flux's type decodes it whole, but for what nothing reads: its spec but
// the chart's source, its inventory, its history but each entry's version
// and time, the fields of its managed-fields entries. One whose
// status does not fit is decoded without status, one whose spec does not
// without spec and status, each told to failed; a list likewise.
func TestReleaseCodec(t *testing.T) {
	u := helmRelease("True", "UpgradeSucceeded", 4)
	spec := u.Object["spec"].(map[string]any)
	spec["chart"] = map[string]any{"spec": map[string]any{"chart": "./charts/web", "reconcileStrategy": "Revision",
		"sourceRef": map[string]any{"kind": "GitRepository", "name": "fleet", "namespace": "flux-system"}, "valuesFiles": []any{"values.yaml"}}}
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	codec := wireCodec{kind: releaseKind(), failed: func(m metav1.Object, err error) { failed = append(failed, m.GetName()+": "+err.Error()) }}
	obj, _, err := codec.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*helmv2.HelmRelease)
	want := &helmv2.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, want); err != nil {
		t.Fatal(err)
	}
	if want.Spec.Values == nil || want.Status.Inventory == nil || len(want.Status.History) != 3 || want.ManagedFields[0].FieldsV1 == nil {
		t.Fatal("the whole object lacks what the codec skips: the case tests nothing")
	}
	want.Spec = helmv2.HelmReleaseSpec{ChartRef: want.Spec.ChartRef, Chart: want.Spec.Chart}
	want.Status.Inventory = nil
	for i, h := range want.Status.History {
		want.Status.History[i] = &helmv2.Snapshot{Version: h.Version, LastDeployed: h.LastDeployed}
	}
	for i := range want.ManagedFields {
		want.ManagedFields[i].FieldsV1 = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n got %+v\nwant %+v", got, want)
	}

	// Parts that do not fit.
	misfits := map[string]*unstructured.Unstructured{}
	for name, field := range map[string][]string{"status": {"status", "installFailures"}, "spec": {"spec", "chartRef"}} {
		m := helmRelease("True", "UpgradeSucceeded", 4)
		m.SetName(name)
		if err := unstructured.SetNestedField(m.Object, "many", field...); err != nil {
			t.Fatal(err)
		}
		misfits[name] = m
		data, _ := m.MarshalJSON()
		obj, _, err := codec.Decode(data, nil, nil)
		hr, _ := obj.(*helmv2.HelmRelease)
		switch {
		case err != nil || hr == nil || hr.Name != name || hr.Generation != 4 || hr.Labels[flux.OwnerNameLabel] != "apps":
			t.Fatalf("%s does not fit: decoded as %+v (%v)", name, obj, err)
		case !reflect.DeepEqual(hr.Status, helmv2.HelmReleaseStatus{}):
			t.Fatalf("%s does not fit: decoded with a status %+v", name, hr.Status)
		case (hr.Spec.ChartRef == nil) != (name == "spec"):
			t.Fatalf("%s does not fit: decoded with the spec %+v", name, hr.Spec)
		}
	}
	if len(failed) != 2 {
		t.Fatalf("failed %q, want both misfits", failed)
	}

	failed = nil
	l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmReleaseList",
		"metadata": map[string]any{"resourceVersion": "9"}}, Items: []unstructured.Unstructured{*u, *misfits["status"]}}
	if data, err = l.MarshalJSON(); err != nil {
		t.Fatal(err)
	}
	if obj, err = codec.decodeList(data); err != nil {
		t.Fatal(err)
	}
	list := obj.(*helmv2.HelmReleaseList)
	if list.ResourceVersion != "9" || len(list.Items) != 2 || !reflect.DeepEqual(&list.Items[0], want) || list.Items[1].Status.LastAttemptedGeneration != 0 || len(failed) != 1 {
		t.Fatalf("list %+v, failed %q", list, failed)
	}
	if _, _, err := codec.Decode([]byte(`{"kind":"Kustomization","apiVersion":"kustomize.toolkit.fluxcd.io/v1"}`), nil, nil); err == nil {
		t.Fatal("a Kustomization decoded as a HelmRelease")
	}
	obj, _, err = codec.Decode([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Expired","code":410}`), nil, nil)
	if s, ok := obj.(*metav1.Status); err != nil || !ok || s.Code != 410 {
		t.Fatalf("a Status decoded as %#v (%v)", obj, err)
	}
}

// BenchmarkDecodeLayer: a Kustomization with 100 objects in its
// inventory, served as JSON, decoded as the dynamic client did (a tree
// of maps: before, the reader then converted the fields it keeps) and as
// the Kustomizations' client does, slimmed as cached.
func BenchmarkDecodeLayer(b *testing.B) {
	benchDecode(b, kustomization("apps", 100, "True", flux.ReasonReconciliationSucceeded, "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", false),
		layerKind(), func(obj runtime.Object) { _ = slimLayer(obj.(*kustomizev1.Kustomization)) })
}

// BenchmarkDecodeRelease: a HelmRelease as helm-controller leaves it
// (values, an inventory, a history of three releases, managed fields),
// decoded likewise by the dynamic client and by the HelmReleases' client.
func BenchmarkDecodeRelease(b *testing.B) {
	benchDecode(b, helmRelease("True", "UpgradeSucceeded", 4), releaseKind(), func(obj runtime.Object) { _ = slimRelease(obj.(*helmv2.HelmRelease)) })
}

// benchDecode decodes u served as JSON: through the dynamic client's
// maps, and through kind's codec, then slim.
func benchDecode(b *testing.B, u *unstructured.Unstructured, kind wireKind, slim func(runtime.Object)) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		b.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		decode func() error
	}{
		{"dynamic", func() error {
			_, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
			return err
		}},
		{"wire", func() error {
			obj, _, err := wireCodec{kind: kind}.Decode(data, nil, nil)
			if err == nil {
				slim(obj)
			}
			return err
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := tt.decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
