package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// Kustomizations and HelmReleases, the kinds a hub holds most of, are
// listed and watched by clients of their own, which decode each object
// straight into Flux's type without what nothing reads: a layer's
// inventory (an entry per object it applied: hundreds in a large one), a
// release's values, inventory and history but its newest entry's time,
// the fields of every managed-fields entry. Skipped in the JSON, never
// built. Through the dynamic client each was first a tree of maps, then
// converted by reflection: more than twice the CPU and several times the
// garbage (BenchmarkDecodeLayer, BenchmarkDecodeRelease), for every
// object of every cluster a hub reads at its start (docs/performance.md,
// "a hub's registered clusters").

// skipped is a field left out of the decoding.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// wireKind is a kind decoded off the wire by the reader itself.
type wireKind struct {
	kind     string
	resource schema.GroupVersionResource
	// decode decodes one object as the API server serves it. One whose
	// fields do not fit Flux's type (none the API server validated can,
	// but Flux's types change) is still returned, with the error
	// (misfit). Only bytes that are not JSON return no object.
	decode func([]byte) (runtime.Object, error)
	// list is a list of the kind, of items decode returned.
	list func(metav1.ListMeta, []runtime.Object) runtime.Object
}

// misfit leaves out of an object decoded with err what did not fit its
// type: the spec and the status when the spec does not (nobody's layer,
// a release of no chart), else the status (no progress, still expected,
// so that no rollout turns applied without it). True when err is such a
// misfit, false when the bytes are not JSON.
func misfit[S, T any](data []byte, err error, spec *S, status *T) bool {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return false
	}
	// Rare: find which part does not fit, the spec decoded alone.
	var parts struct{ Spec json.RawMessage }
	_ = json.Unmarshal(data, &parts)
	if len(parts.Spec) > 0 && json.Unmarshal(parts.Spec, new(S)) != nil {
		*spec = *new(S)
	}
	*status = *new(T)
	return true
}

// wireMeta is an object's metadata as decoded: its managed fields
// without the fields each entry manages.
type wireMeta struct {
	metav1.ObjectMeta
	ManagedFields []struct {
		metav1.ManagedFieldsEntry
		FieldsV1 skipped `json:"fieldsV1"`
	} `json:"managedFields"`
}

func (w *wireMeta) meta() metav1.ObjectMeta {
	m := w.ObjectMeta
	m.ManagedFields = nil
	for _, mf := range w.ManagedFields {
		m.ManagedFields = append(m.ManagedFields, mf.ManagedFieldsEntry)
	}
	return m
}

// wireLayer is a Kustomization as decoded: its metadata and status
// shadow the embedded ones (encoding/json takes the shallower field),
// each without what is skipped. A layer's managed fields are not read.
type wireLayer struct {
	kustomizev1.Kustomization
	Metadata struct {
		metav1.ObjectMeta
		ManagedFields skipped `json:"managedFields"`
	} `json:"metadata"`
	Status struct {
		kustomizev1.KustomizationStatus
		Inventory skipped `json:"inventory"`
	} `json:"status"`
}

func (w *wireLayer) layer() *kustomizev1.Kustomization {
	k := w.Kustomization
	k.ObjectMeta, k.Status = w.Metadata.ObjectMeta, w.Status.KustomizationStatus
	return &k
}

// decodeLayer decodes a Kustomization (wireKind.decode).
func decodeLayer(data []byte) (*kustomizev1.Kustomization, error) {
	var w wireLayer
	err := json.Unmarshal(data, &w)
	if err != nil && !misfit(data, err, &w.Spec, &w.Status) {
		return nil, err
	}
	return w.layer(), err
}

func layerKind() wireKind {
	return newWireKind(flux.KindKustomization, flux.Kustomizations(), decodeLayer,
		func(lm metav1.ListMeta, items []kustomizev1.Kustomization) runtime.Object {
			return &kustomizev1.KustomizationList{ListMeta: lm, Items: items}
		})
}

// wireReleaseSpec is what is decoded of a HelmRelease's spec: its chart's
// source (ingest.Follows, ingest.ChartSource), not its values.
type wireReleaseSpec struct {
	ChartRef *helmv2.CrossNamespaceSourceReference `json:"chartRef"`
	Chart    *helmv2.HelmChartTemplate             `json:"chart"`
}

// wireReleaseStatus is a HelmRelease's status as decoded: of its history,
// each entry's version and deployment time (Snapshots.Latest finds the
// newest by its version; its time is read), not its inventory.
type wireReleaseStatus struct {
	helmv2.HelmReleaseStatus
	History []struct {
		Version      int         `json:"version"`
		LastDeployed metav1.Time `json:"lastDeployed"`
	} `json:"history"`
	Inventory skipped `json:"inventory"`
}

// wireRelease is a HelmRelease as decoded.
type wireRelease struct {
	helmv2.HelmRelease
	Metadata wireMeta          `json:"metadata"`
	Spec     wireReleaseSpec   `json:"spec"`
	Status   wireReleaseStatus `json:"status"`
}

func (w *wireRelease) release() *helmv2.HelmRelease {
	hr := w.HelmRelease
	hr.ObjectMeta = w.Metadata.meta()
	hr.Spec.ChartRef, hr.Spec.Chart = w.Spec.ChartRef, w.Spec.Chart
	hr.Status = w.Status.HelmReleaseStatus
	hr.Status.History = nil
	for _, h := range w.Status.History {
		hr.Status.History = append(hr.Status.History, &helmv2.Snapshot{Version: h.Version, LastDeployed: h.LastDeployed})
	}
	return &hr
}

// decodeRelease decodes a HelmRelease (wireKind.decode).
func decodeRelease(data []byte) (*helmv2.HelmRelease, error) {
	var w wireRelease
	err := json.Unmarshal(data, &w)
	if err != nil && !misfit(data, err, &w.Spec, &w.Status) {
		return nil, err
	}
	return w.release(), err
}

func releaseKind() wireKind {
	return newWireKind(flux.KindHelmRelease, flux.HelmReleases(), decodeRelease,
		func(lm metav1.ListMeta, items []helmv2.HelmRelease) runtime.Object {
			return &helmv2.HelmReleaseList{ListMeta: lm, Items: items}
		})
}

// newWireKind is the row of kind, whose objects decode decodes and list
// makes a list of.
func newWireKind[T any, P interface {
	*T
	runtime.Object
}](kind string, resource schema.GroupVersionResource, decode func([]byte) (P, error), list func(metav1.ListMeta, []T) runtime.Object) wireKind {
	return wireKind{
		kind: kind, resource: resource,
		decode: func(data []byte) (runtime.Object, error) {
			obj, err := decode(data)
			if obj == nil {
				return nil, err // not a typed nil
			}
			return obj, err
		},
		list: func(lm metav1.ListMeta, objs []runtime.Object) runtime.Object {
			items := make([]T, len(objs))
			for i, o := range objs {
				items[i] = *o.(P)
			}
			return list(lm, items)
		},
	}
}

// wireCodec decodes what the API server sends of its kind: watch events'
// envelopes (into a *metav1.WatchEvent), objects, lists, and the Status
// of an error. It encodes nothing: its client only reads.
type wireCodec struct {
	kind wireKind
	// failed hears of an object that did not fit (wireKind.decode),
	// decoded all the same: an error here would end the watch, and the
	// next one would fail on it again.
	failed func(obj metav1.Object, err error)
}

func (c wireCodec) Identifier() runtime.Identifier {
	return runtime.Identifier("flux-deploy-notifier/" + c.kind.resource.Resource)
}

func (c wireCodec) Encode(runtime.Object, io.Writer) error {
	return fmt.Errorf("the %s' client only reads", c.kind.resource.Resource)
}

func (c wireCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into != nil { // a watch event's envelope: its object is decoded next
		ev, ok := into.(*metav1.WatchEvent)
		if !ok {
			return nil, nil, fmt.Errorf("the %s' client decodes no %T", c.kind.resource.Resource, into)
		}
		if splitEvent(data, ev) {
			return ev, nil, nil
		}
		return ev, nil, json.Unmarshal(data, ev)
	}
	obj, err := c.kind.decode(data)
	if obj == nil {
		return nil, nil, err
	}
	switch kind := obj.GetObjectKind().GroupVersionKind().Kind; {
	case kind == "Status": // an error's (its fields do not fit the kind's)
		s := &metav1.Status{}
		return s, nil, json.Unmarshal(data, s)
	case kind != c.kind.kind && kind != "":
		return nil, nil, fmt.Errorf("the %s' client decodes no %s", c.kind.resource.Resource, kind)
	case err != nil && c.failed != nil:
		m, _ := apimeta.Accessor(obj)
		c.failed(m, err)
	}
	return obj, nil, nil
}

// decodeList decodes a list of the codec's kind, each item as Decode
// does. Rare: informers sync by a watch streaming the objects, listing
// only from an API server that cannot.
func (c wireCodec) decodeList(data []byte) (runtime.Object, error) {
	var w struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode a list of %s: %w", c.kind.resource.Resource, err)
	}
	items := make([]runtime.Object, len(w.Items))
	for i, raw := range w.Items {
		obj, _, err := c.Decode(raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode a list of %s: %w", c.kind.resource.Resource, err)
		}
		if _, ok := obj.(*metav1.Status); ok {
			return nil, fmt.Errorf("a list of %s holds a %T", c.kind.resource.Resource, obj)
		}
		items[i] = obj
	}
	return c.kind.list(w.Metadata, items), nil
}

// wireClient lists and watches the objects of a kind, decoded by its
// codec.
type wireClient struct {
	rc    rest.Interface
	codec wireCodec
}

// newWireClient is a client of codec's kind for cfg, sharing hc (its
// connections) with the reader's other clients.
func newWireClient(cfg *rest.Config, hc *http.Client, codec wireCodec) (*wireClient, error) {
	cfg = rest.CopyConfig(cfg)
	gv := codec.kind.resource.GroupVersion()
	cfg.GroupVersion, cfg.APIPath = &gv, "/apis"
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = runtime.NewSimpleNegotiatedSerializer(runtime.SerializerInfo{
		MediaType: runtime.ContentTypeJSON, MediaTypeType: "application", MediaTypeSubType: "json",
		EncodesAsText: true, Serializer: codec,
		StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: codec, Framer: framer{}},
	})
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &wireClient{rc: rc, codec: codec}, nil
}

// listWatch lists and watches the objects of namespace ns (all when "")
// matching selector.
func (c *wireClient) listWatch(ns, selector string) *cache.ListWatch {
	req := func(opts metav1.ListOptions) *rest.Request {
		if selector != "" {
			opts.LabelSelector = selector
		}
		return c.rc.Get().NamespaceIfScoped(ns, ns != "").Resource(c.codec.kind.resource.Resource).
			VersionedParams(&opts, metav1.ParameterCodec)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			data, err := req(opts).Do(ctx).Raw()
			if err != nil {
				return nil, err
			}
			return c.codec.decodeList(data)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return req(opts).Watch(ctx)
		},
	}
}

// misfitLogged logs an object of kind that did not fit Flux's type,
// cached all the same (wireKind.decode).
func misfitLogged(log *slog.Logger, kind string) func(metav1.Object, error) {
	return func(m metav1.Object, err error) {
		log.Error("read a Flux object", "err", err, "object", kind+"/"+m.GetNamespace()+"/"+m.GetName())
	}
}
