package cluster

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// TestLayerCodec: the Kustomizations' codec decodes a Kustomization as
// Flux's type decodes it whole, but for its inventory and managed fields
// (its annotations kept: a bookmark's say when a watch's initial events
// end); a watch event's envelope; the Status of an error; and a list, in
// one pass or, when an item does not fit, each item alone, the others
// whole.
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
	codec := layerCodec{failed: func(k *kustomizev1.Kustomization, err error) { failed = append(failed, k.Name+": "+err.Error()) }}
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
		l, err := decodeLayers(list(tt.items...), codec)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
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

// BenchmarkDecodeLayer: a Kustomization with 100 objects in its
// inventory, served as JSON, decoded as the dynamic client did (a tree
// of maps: before, the reader then converted the fields it keeps) and as
// the Kustomizations' client does, slimmed as cached.
func BenchmarkDecodeLayer(b *testing.B) {
	data, err := json.Marshal(kustomization("apps", 100, "True", flux.ReasonReconciliationSucceeded, "Applied revision: main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", false).Object)
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
			obj, _, err := layerCodec{}.Decode(data, nil, nil)
			if err == nil {
				_ = slimLayer(obj.(*kustomizev1.Kustomization))
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
