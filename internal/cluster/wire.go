package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// Kustomizations are listed and watched by a client of their own, which
// decodes each one straight into Flux's type without its inventory (an
// entry per object the layer applied: hundreds in a large one) or its
// managed fields: skipped in the JSON, never built. Through the dynamic
// client each was first a tree of maps, a map for each inventory entry,
// then converted by reflection: the maps alone took more than twice the
// CPU and six times the garbage (BenchmarkDecodeLayer), for every layer of
// every cluster a hub reads at its start (docs/performance.md, "a hub's
// registered clusters").

// skipped is a field left out of the decoding.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// wireLayer is a Kustomization as decoded: its metadata and status
// shadow the embedded ones (encoding/json takes the shallower field),
// each without what is skipped.
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

// decodeLayer decodes a Kustomization as the API server serves it. One
// whose fields do not fit Flux's type (none the API server validated
// can, but Flux's types change) is still returned, with the error: a spec
// that does not fit leaves it with neither spec nor status (nobody's
// layer), a status that does not, without status (a layer of its source
// without progress, still expected, so that no rollout turns applied
// without it). Only bytes that are not JSON return no layer.
func decodeLayer(data []byte) (*kustomizev1.Kustomization, error) {
	var w wireLayer
	err := json.Unmarshal(data, &w)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return w.layer(), nil
	case !errors.As(err, &te):
		return nil, err
	}
	// Rare: find which part does not fit, each decoded alone.
	k := w.layer()
	var parts struct{ Spec, Status json.RawMessage }
	_ = json.Unmarshal(data, &parts)
	var spec kustomizev1.KustomizationSpec
	if len(parts.Spec) > 0 && json.Unmarshal(parts.Spec, &spec) != nil {
		k.Spec, k.Status = kustomizev1.KustomizationSpec{}, kustomizev1.KustomizationStatus{}
		return k, err
	}
	k.Status = kustomizev1.KustomizationStatus{}
	return k, err
}

// layerCodec decodes what the API server sends of Kustomizations: watch
// events' envelopes (into a *metav1.WatchEvent), Kustomizations, and the
// Status of an error. It encodes nothing: the client only reads.
type layerCodec struct {
	// failed hears of a Kustomization that did not fit (decodeLayer),
	// decoded all the same: an error here would end the watch, and the
	// next one would fail on it again.
	failed func(k *kustomizev1.Kustomization, err error)
}

func (layerCodec) Identifier() runtime.Identifier { return "flux-deploy-notifier/layers" }

func (layerCodec) Encode(runtime.Object, io.Writer) error {
	return errors.New("the Kustomizations' client only reads")
}

func (c layerCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into != nil { // a watch event's envelope: its object is decoded next
		ev, ok := into.(*metav1.WatchEvent)
		if !ok {
			return nil, nil, fmt.Errorf("the Kustomizations' client decodes no %T", into)
		}
		return ev, nil, json.Unmarshal(data, ev)
	}
	k, err := decodeLayer(data)
	switch {
	case k == nil:
		return nil, nil, err
	case k.Kind == "Status": // an error's (its fields do not fit a layer's)
		s := &metav1.Status{}
		return s, nil, json.Unmarshal(data, s)
	case k.Kind != flux.KindKustomization && k.Kind != "":
		return nil, nil, fmt.Errorf("the Kustomizations' client decodes no %s", k.Kind)
	case err != nil && c.failed != nil:
		c.failed(k, err)
	}
	return k, nil, nil
}

// wireLayerList is a list of Kustomizations as decoded.
type wireLayerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []wireLayer `json:"items"`
}

// decodeLayers decodes a list of Kustomizations, each as decodeLayer
// does (failed hears of those that do not fit).
func decodeLayers(data []byte, codec layerCodec) (*kustomizev1.KustomizationList, error) {
	var w wireLayerList
	err := json.Unmarshal(data, &w)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		return nil, fmt.Errorf("decode a list of Kustomizations: %w", err)
	}
	list := &kustomizev1.KustomizationList{TypeMeta: w.TypeMeta, ListMeta: w.ListMeta, Items: make([]kustomizev1.Kustomization, len(w.Items))}
	if err == nil {
		for i := range w.Items {
			list.Items[i] = *w.Items[i].layer()
		}
		return list, nil
	}
	// Rare: an item does not fit. Each is decoded alone.
	var raw struct{ Items []json.RawMessage }
	if err := json.Unmarshal(data, &raw); err != nil || len(raw.Items) != len(w.Items) {
		return nil, fmt.Errorf("decode a list of Kustomizations: %w", err)
	}
	for i, item := range raw.Items {
		obj, _, err := codec.Decode(item, nil, nil)
		if err != nil {
			return nil, err
		}
		k, ok := obj.(*kustomizev1.Kustomization)
		if !ok {
			return nil, fmt.Errorf("a list of Kustomizations holds a %T", obj)
		}
		list.Items[i] = *k
	}
	return list, nil
}

// layerClient lists and watches Kustomizations, decoded by its codec.
type layerClient struct {
	rc    rest.Interface
	codec layerCodec
}

// newLayerClient is a client of Kustomizations for cfg, sharing hc (its
// connections) with the reader's other clients.
func newLayerClient(cfg *rest.Config, hc *http.Client, codec layerCodec) (*layerClient, error) {
	cfg = rest.CopyConfig(cfg)
	gv := kustomizev1.GroupVersion
	cfg.GroupVersion, cfg.APIPath = &gv, "/apis"
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = runtime.NewSimpleNegotiatedSerializer(runtime.SerializerInfo{
		MediaType: runtime.ContentTypeJSON, MediaTypeType: "application", MediaTypeSubType: "json",
		EncodesAsText: true, Serializer: codec,
		StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: codec, Framer: jsonserializer.Framer},
	})
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &layerClient{rc: rc, codec: codec}, nil
}

// listWatch lists and watches the Kustomizations of namespace ns (all
// when "") matching selector.
func (c *layerClient) listWatch(ns, selector string) *cache.ListWatch {
	req := func(opts metav1.ListOptions) *rest.Request {
		if selector != "" {
			opts.LabelSelector = selector
		}
		return c.rc.Get().NamespaceIfScoped(ns, ns != "").Resource("kustomizations").
			VersionedParams(&opts, metav1.ParameterCodec)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			data, err := req(opts).Do(ctx).Raw()
			if err != nil {
				return nil, err
			}
			return decodeLayers(data, c.codec)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return req(opts).Watch(ctx)
		},
	}
}

// layerFailed logs a Kustomization that did not fit Flux's type, cached
// all the same (decodeLayer).
func layerFailed(log *slog.Logger) func(*kustomizev1.Kustomization, error) {
	return func(k *kustomizev1.Kustomization, err error) {
		log.Error("read a Flux object", "err", err, "object", flux.KindKustomization+"/"+k.Namespace+"/"+k.Name)
	}
}
