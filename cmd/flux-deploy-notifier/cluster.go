package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
)

// clusterConfig is the cluster part of serve's configuration.
type clusterConfig struct {
	kubeconfig, mode, namespaces, selector *string
	blindAfter                             *time.Duration
}

func (c *clusterConfig) flags(f *flags) {
	c.kubeconfig = f.String("kubeconfig", "FDN_KUBECONFIG", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	c.mode = f.String("cluster", "FDN_CLUSTER", "auto", "auto: read the cluster when a configuration is found; off: events only")
	c.namespaces = f.String("namespaces", "FDN_NAMESPACES", "", "namespaces to watch, as a,b (default all)")
	c.selector = f.String("layer-selector", "FDN_LAYER_SELECTOR", "", "label selector restricting the Kustomizations read")
	c.blindAfter = f.Duration("blind-after", "FDN_BLIND_AFTER", 30*time.Minute, "with cluster access: warn, and mail once, when layers exist but no event came from Flux for this long")
	f.DurationAlias("silence-after", "FDN_SILENCE_AFTER", "blind-after", "FDN_BLIND_AFTER", c.blindAfter)
}

func (c *clusterConfig) validate() error {
	if *c.mode != "auto" && *c.mode != "off" {
		return fmt.Errorf("--cluster must be auto or off, not %q", *c.mode)
	}
	if *c.blindAfter <= 0 {
		return errors.New("--blind-after must be positive")
	}
	return nil
}

// restConfig finds how to reach the cluster: --kubeconfig, else in-cluster,
// else $KUBECONFIG; nil when none applies (events only).
func (c *clusterConfig) restConfig(getenv func(string) string) (*rest.Config, string, error) {
	if *c.mode == "off" {
		return nil, "off", nil
	}
	if *c.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", *c.kubeconfig)
		if err != nil {
			return nil, "", fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, *c.kubeconfig, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, "in-cluster", nil
	} else if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, "", fmt.Errorf("in-cluster configuration: %w", err)
	}
	if path := getenv("KUBECONFIG"); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, "", fmt.Errorf("$KUBECONFIG: %w", err)
		}
		return cfg, path, nil
	}
	return nil, "none found", nil
}

// reader builds the cluster reader, or nil for events only.
func (c *clusterConfig) reader(getenv func(string) string, sub cluster.Submitter, clusterName string, statusMoved func(), log *slog.Logger) (*cluster.Reader, error) {
	cfg, from, err := c.restConfig(getenv)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		log.Info("no cluster access: expected layers come from events", "cluster", from)
		return nil, nil
	}
	cfg.UserAgent = "flux-deploy-notifier"
	var namespaces []string
	for _, ns := range strings.Split(*c.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	log.Info("reading the cluster", "config", from, "cluster", clusterName, "namespaces", len(namespaces))
	return cluster.NewForConfig(cfg, sub, cluster.Config{
		Cluster: clusterName, Namespaces: namespaces, LayerSelector: *c.selector, StatusMoved: statusMoved,
	}, log, time.Now)
}
