package cluster

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// LayerListWatch is the reader's list and watch of the Kustomizations of
// namespace ns, for the tests of package cluster_test.
func LayerListWatch(cfg *rest.Config, ns string) (*cache.ListWatch, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c, err := newWireClient(cfg, hc, wireCodec{kind: layerKind()})
	if err != nil {
		return nil, err
	}
	return c.listWatch(ns, ""), nil
}
