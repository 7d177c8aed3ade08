package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
)

// clusterConfig is the cluster part of serve's configuration.
type clusterConfig struct {
	kubeconfig, mode, namespaces, selector, secretsNamespace *string
	blindAfter                                               *time.Duration
}

func (c *clusterConfig) flags(f *flags) {
	c.kubeconfig = f.String("kubeconfig", "FDN_KUBECONFIG", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	c.mode = f.String("cluster", "FDN_CLUSTER", "auto", "auto: read the cluster when a configuration is found; off: events only")
	c.namespaces = f.String("namespaces", "FDN_NAMESPACES", "", "namespaces to watch, as a,b (default all)")
	c.selector = f.String("layer-selector", "FDN_LAYER_SELECTOR", "", "label selector restricting the Kustomizations read")
	c.secretsNamespace = f.String("cluster-secrets-namespace", "FDN_CLUSTER_SECRETS_NAMESPACE", "", "where clusters to read besides this one are registered, as Secrets labelled "+clusters.ClusterLabel+"=<name> (default: the pod's namespace, $POD_NAMESPACE, else flux-deploy-notifier)")
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

// reader builds the cluster reader, or nil for events only, and returns
// the configuration it reads the cluster with.
func (c *clusterConfig) reader(getenv func(string) string, sub cluster.Submitter, clusterName string, statusMoved func(), log *slog.Logger) (*cluster.Reader, *rest.Config, error) {
	cfg, from, err := c.restConfig(getenv)
	if err != nil {
		return nil, nil, err
	}
	if cfg == nil {
		log.Info("no cluster access: expected layers come from events", "cluster", from)
		return nil, nil, nil
	}
	cfg.UserAgent = "flux-deploy-notifier"
	rc := c.readerConfig(clusterName)
	rc.StatusMoved = statusMoved
	log.Info("reading the cluster", "config", from, "cluster", clusterName, "namespaces", len(rc.Namespaces))
	r, err := cluster.NewForConfig(cfg, sub, rc, log, time.Now)
	return r, cfg, err
}

// readerConfig is how a cluster named name is read: every cluster, the
// local one and those registered, in the same namespaces and layers.
func (c *clusterConfig) readerConfig(name string) cluster.Config {
	var namespaces []string
	for _, ns := range strings.Split(*c.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	return cluster.Config{Cluster: name, Namespaces: namespaces, LayerSelector: *c.selector}
}

// registry builds the registry of the clusters registered in the
// service's namespace of the local cluster (cfg), or nil when the service
// may not list Secrets there: reading other clusters is optional, and the
// install's Role grants it.
func (c *clusterConfig) registry(ctx context.Context, cfg *rest.Config, getenv func(string) string, local string, run clusters.RunFunc, log *slog.Logger) (*clusters.Registry, error) {
	ns := *c.secretsNamespace
	if ns == "" {
		if ns = getenv("POD_NAMESPACE"); ns == "" {
			ns = "flux-deploy-notifier"
		}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	reg := clusters.New(dyn, ns, local, run, log)
	accessCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := reg.CheckAccess(accessCtx); err != nil {
		if apierrors.IsForbidden(err) {
			log.Info("clusters registered as Secrets are not read: no permission to list Secrets (manifests/rbac.yaml's Role grants it)", "namespace", ns)
			return nil, nil
		}
		return nil, fmt.Errorf("list the clusters registered in %s: %w", ns, err)
	}
	log.Info("reading the clusters registered as Secrets", "namespace", ns, "label", clusters.ClusterLabel)
	return reg, nil
}
