package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
)

// The clusters a hub reads besides its own (internal/clusters registers
// them): each read by a cluster.Reader of its own, its state said on
// /readyz and /metrics.

// readRegistered reads a registered cluster as the local one is read,
// until ctx ends. A cluster it cannot read yet (unreachable, a permission
// missing) is tried again, at most a minute apart, its failure logged once
// until it changes and said meanwhile on /readyz (remoteReads).
func (s *service) readRegistered(ctx context.Context, c clusters.Cluster) {
	log := s.log.With("cluster", c.Name)
	defer s.remote.set(c.Name, nil, "")
	// Its pipe is watched while it is read: without its layers, its
	// silence would look like no deploys.
	watch := func(layers func() int) {
		if err := s.watchdog.Watch(c.Name, layers); err != nil {
			log.Error("the pipe from its notification-controller is not watched", "err", err)
		}
	}
	defer s.watchdog.Forget(c.Name)
	rc := s.c.cluster.readerConfig(c.Name)
	rc.StatusMoved = func() { s.watchdog.StatusMoved(c.Name) }
	failing, backoff := "", time.Second
	for ctx.Err() == nil {
		r, err := cluster.NewForConfig(c.Config, s.node, rc, log, time.Now)
		if err == nil {
			accessCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = r.CheckAccess(accessCtx)
			cancel()
		}
		if err == nil {
			failing, backoff = "", time.Second
			s.remote.set(c.Name, r, "")
			watch(r.Layers)
			if err = r.Run(ctx); err == nil {
				return // ctx ended
			}
		}
		watch(nil)
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads[name].reader
}

// readers are the registered clusters being read, by name.
func (m *remoteReads) readers() map[string]*cluster.Reader {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*cluster.Reader, len(m.reads))
	for name, rr := range m.reads {
		if rr.reader != nil {
			out[name] = rr.reader
		}
	}
	return out
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
	readers := s.remote.readers()
	seen := map[string]bool{s.c.engine.DefaultCluster: true}
	for _, st := range s.registered.States() {
		if !seen[st.Name] {
			seen[st.Name] = true
			read(st.Name, readers[st.Name])
		}
	}
}
