package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
)

// The clusters a hub reads besides its own (internal/clusters registers
// them): each read by a cluster.Reader of its own, its state said on
// /readyz and /metrics.

// readRegistered reads a registered cluster as the local one is read,
// until ctx ends: on PostgreSQL while this replica holds its lease
// (internal/share), alone on bbolt. Its pipe is watched all along, by
// whichever replica leads.
func (s *service) readRegistered(ctx context.Context, c clusters.Cluster) {
	log := s.log.With("cluster", c.Name)
	if err := s.watchdog.Watch(c.Name, s.layersOf(c)); err != nil {
		log.Error("the pipe from its notification-controller is not watched", "err", err)
	}
	defer s.watchdog.Forget(c.Name)
	if s.sharer == nil {
		s.readCluster(ctx, c, s.node, log)
		return
	}
	for ctx.Err() == nil {
		lease, leaseCtx, err := s.sharer.Hold(ctx, c.Name)
		if err != nil {
			return
		}
		s.readCluster(leaseCtx, c, s.node.Fenced(lease), log.With("epoch", lease.Epoch))
	}
}

// readCluster reads c until ctx ends, its observations submitted to sub.
// A cluster it cannot read yet (unreachable, a permission missing) is
// tried again, at most a minute apart, its failure logged once until it
// changes and said meanwhile on /readyz (remoteReads).
func (s *service) readCluster(ctx context.Context, c clusters.Cluster, sub cluster.Submitter, log *slog.Logger) {
	defer s.remote.set(c.Name, nil, "")
	rc := s.c.cluster.readerConfig(c.Name)
	rc.StatusMoved = func() { s.watchdog.StatusMoved(c.Name) }
	// No gzip from a registered cluster's API server: each of its open
	// watches would hold a decompressor (about 45 KB, seven a cluster),
	// which a hub reading hundreds of clusters feels more than the bytes
	// (docs/performance.md, "a hub's registered clusters").
	cfg := rest.CopyConfig(c.Config)
	cfg.DisableCompression = true
	failing, backoff := "", time.Second
	for ctx.Err() == nil {
		r, err := cluster.NewForConfig(cfg, sub, rc, log, time.Now)
		if err == nil {
			accessCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = r.CheckAccess(accessCtx)
			cancel()
		}
		if err == nil {
			failing, backoff = "", time.Second
			s.remote.set(c.Name, r, "")
			if err = r.Run(ctx); err == nil {
				return // ctx ended
			}
		}
		if ctx.Err() != nil {
			return
		}
		if msg := err.Error(); msg != failing {
			log.Warn("a registered cluster is not read; trying again", "secret", c.Secret, "err", err)
			failing = msg
		}
		s.remote.set(c.Name, nil, fmt.Sprintf("cluster %s (Secret %s) is not read, tried again: %s", c.Name, c.Secret, failing))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// layersOf counts c's layers for the blindness watchdog: its reader's,
// where this replica reads it (false while it fails: that fault is told
// instead), else a census of its Kustomizations (another replica holds its
// lease); false when that cannot tell either. Asked only of a cluster
// silent for --blind-after, by the leader's watchdog alone.
func (s *service) layersOf(c clusters.Cluster) func() (int, bool) {
	var census *cluster.Census
	return func() (int, bool) {
		if rr, here := s.remote.get(c.Name); here || s.sharer == nil {
			if rr.reader == nil || !rr.reader.Up() {
				return 0, false
			}
			return rr.reader.Layers(), true
		}
		if census == nil {
			var err error
			if census, err = cluster.NewCensus(c.Config, s.c.cluster.readerConfig(c.Name)); err != nil {
				return 0, false
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := census.Layers(ctx)
		return n, err == nil
	}
}

// remoteReads is how each registered cluster is read: its reader, or why
// it is not read.
type remoteReads struct {
	mu    sync.Mutex
	reads map[string]remoteRead
}

type remoteRead struct {
	reader  *cluster.Reader
	failing string
}

// set records cluster name's reader or failure; neither: it is not read.
func (m *remoteReads) set(name string, r *cluster.Reader, failing string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r == nil && failing == "" {
		delete(m.reads, name)
		return
	}
	if m.reads == nil {
		m.reads = map[string]remoteRead{}
	}
	m.reads[name] = remoteRead{r, failing}
}

// reader is registered cluster name's reader, nil while it is not read.
func (m *remoteReads) reader(name string) *cluster.Reader {
	rr, _ := m.get(name)
	return rr.reader
}

// get is how registered cluster name is read here; false when it is not
// (another replica reads it, or none).
func (m *remoteReads) get(name string) (remoteRead, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rr, ok := m.reads[name]
	return rr, ok
}

// all are the registered clusters read here, or failing to be, by name.
func (m *remoteReads) all() map[string]remoteRead {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.reads)
}

// warnings says, for each registered cluster, what keeps it from being
// read, by name: its Secret's fault (reg), its reader's, or its API
// server's failing requests.
func (m *remoteReads) warnings(reg *clusters.Registry) []string {
	var out []string
	for _, st := range reg.States() {
		if st.Err != "" {
			out = append(out, fmt.Sprintf("cluster %s (Secret %s) is not read: %s", st.Name, st.Secret, st.Err))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	names := slices.Sorted(maps.Keys(m.reads))
	for _, name := range names {
		switch rr := m.reads[name]; {
		case rr.failing != "":
			out = append(out, rr.failing)
		case rr.reader != nil:
			if w := rr.reader.Warning(); w != "" {
				out = append(out, "cluster "+name+": "+w)
			}
		}
	}
	return out
}

// clusterMetrics are each cluster's read state, at every scrape: the
// service's own and those registered (fdn_cluster_up,
// fdn_cluster_sync_seconds).
type clusterMetrics struct {
	s        *service
	up, sync *prometheus.Desc
}

func newClusterMetrics(s *service) clusterMetrics {
	return clusterMetrics{s: s,
		up: prometheus.NewDesc("fdn_cluster_up",
			"1 while the cluster is read (caches synced, its API server answering), 0 while not: a registered cluster whose Secret, access or API server fails", []string{"cluster"}, nil),
		sync: prometheus.NewDesc("fdn_cluster_sync_seconds",
			"how long the cluster's caches took to sync when its reader last started", []string{"cluster"}, nil),
	}
}

func (m clusterMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.up
	ch <- m.sync
}

func (m clusterMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.s
	read := func(name string, r *cluster.Reader) {
		up := 0.0
		if r != nil && r.Up() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up, name)
		if r == nil {
			return
		}
		if d, ok := r.SyncedIn(); ok {
			ch <- prometheus.MustNewConstMetric(m.sync, prometheus.GaugeValue, d.Seconds(), name)
		}
	}
	read(s.c.engine.DefaultCluster, s.reader)
	if s.registered == nil {
		return
	}
	reads := s.remote.all()
	seen := map[string]bool{s.c.engine.DefaultCluster: true}
	for _, st := range s.registered.States() {
		if seen[st.Name] {
			continue
		}
		seen[st.Name] = true
		// On PostgreSQL a replica speaks of the clusters it holds the
		// lease of (read, or failing); the others are another's.
		if rr, ok := reads[st.Name]; ok || st.Err != "" || s.sharer == nil {
			read(st.Name, rr.reader)
		}
	}
}

// clusterStates are the clusters read, as the list page shows them: the
// service's own first, then those registered, with what keeps each from
// being read and its blindness.
func (s *service) clusterStates() []ui.Cluster {
	read := func(c ui.Cluster, r *cluster.Reader) ui.Cluster {
		c.Layers = r.Layers()
		switch {
		case r.Up():
			c.State = "read"
		case !r.Synced():
			c.State, c.Detail = "failing", "its caches have not synced yet"
		default:
			c.State, c.Detail = "failing", r.Warning()
		}
		return c
	}
	out := []ui.Cluster{read(ui.Cluster{Name: s.c.engine.DefaultCluster, From: "its own"}, s.reader)}
	if s.registered != nil {
		reads := s.remote.all()
		for _, st := range s.registered.States() {
			c := ui.Cluster{Name: st.Name, Environment: st.Environment, From: "Secret " + st.Secret}
			rr, ok := reads[st.Name]
			switch {
			case st.Err != "":
				c.State, c.Detail = "not-read", st.Err
			case ok && rr.reader != nil:
				c = read(c, rr.reader)
			case ok:
				c.State, c.Detail = "not-read", rr.failing
			case s.sharer != nil:
				c.State = "elsewhere"
			default:
				c.State, c.Detail = "not-read", "its reader is starting"
			}
			out = append(out, c)
		}
	}
	for i, c := range out {
		if blind := s.watchdog.WarningOf(c.Name); blind != "" {
			out[i].Detail = strings.TrimPrefix(c.Detail+"; "+blind, "; ")
		}
	}
	return out
}
