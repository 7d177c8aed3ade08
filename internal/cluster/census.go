package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// Census counts a cluster's layers without reading it: the Kustomizations
// of its namespaces that the layer selector takes, listed as metadata
// alone. It is how a replica that does not read a cluster (another holds
// its lease) tells whether that cluster's silence is blindness.
type Census struct {
	client     metadata.Interface
	namespaces []string
	selector   string
}

// NewCensus returns the census of the cluster cfg reaches, read as c says.
func NewCensus(cfg *rest.Config, c Config) (*Census, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	namespaces := c.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	return &Census{client: mc, namespaces: namespaces, selector: c.LayerSelector}, nil
}

// Layers counts the layers.
func (c *Census) Layers(ctx context.Context) (int, error) {
	n := 0
	for _, ns := range c.namespaces {
		list, err := c.client.Resource(flux.Kustomizations()).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: c.selector})
		if err != nil {
			return 0, fmt.Errorf("count the layers in %s: %w", nsName(ns), err)
		}
		n += len(list.Items)
	}
	return n, nil
}
