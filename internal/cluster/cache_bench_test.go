package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// counting takes every batch and counts the observations.
type counting struct{ n atomic.Int64 }

func (c *counting) SubmitAll(_ context.Context, obs []rollout.Observation) error {
	c.n.Add(int64(len(obs)))
	return nil
}

// BenchmarkReaderHeap reports the heap a running reader holds per layer
// once it has looked at them all: 1,000 Kustomizations on a real kube-apiserver,
// each with 100 objects in its inventory and a status as
// kustomize-controller writes it, on 10 GitRepositories, and three
// HelmReleases a layer, as helm-controller leaves them (make bench-fleet's
// cluster: 64 layers, 192 releases).
func BenchmarkReaderHeap(b *testing.B) {
	const layers, sources, objects, releases = 1000, 10, 100, 3
	c := clustertest.Start(b)
	ctx := context.Background()
	const ns = "fleet"
	w := c.NewWorld(b, ns, time.Now().UTC().Truncate(time.Second))
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	for i := range sources {
		w.Source(fmt.Sprintf("src-%d", i), rev)
	}
	for i := range layers {
		l := clustertest.FleetLayer{Name: fmt.Sprintf("layer-%d", i), Source: fmt.Sprintf("src-%d", i%sources), Rev: rev,
			Objects: objects, History: 5}
		if i > 0 {
			l.After = fmt.Sprintf("layer-%d", i-1)
		}
		if err := w.CreateFleetLayer(l); err != nil {
			b.Fatal(err)
		}
		for j := range releases {
			if err := w.CreateFleetRelease(clustertest.FleetRelease{Name: fmt.Sprintf("%s-%d", l.Name, j), Layer: l.Name, Version: "1.4.2"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var perLayer float64
	for b.Loop() {
		before := cluster.LiveHeap()
		sub := &counting{}
		r, err := cluster.NewForConfig(c.Config, sub, cluster.Config{Cluster: "prod", Namespaces: []string{ns}}, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.CheckAccess(ctx); err != nil { // as the service does: it finds the releases readable
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		// Measured once the reader has looked at every layer (a membership
		// mark and a status each at least) and stopped submitting: what it
		// holds for good, not the batches in flight.
		deadline := time.Now().Add(2 * time.Minute)
		for last := int64(-1); !r.Synced() || r.Layers() != layers || sub.n.Load() < 2*layers || sub.n.Load() != last; {
			if time.Now().After(deadline) {
				b.Fatalf("the reader did not look at %d layers in time (%d observations)", layers, sub.n.Load())
			}
			last = sub.n.Load()
			time.Sleep(250 * time.Millisecond)
		}
		// The first look only: a reader stopped lets go of its caches
		// when its informers' goroutines end, which may be after the
		// next one took its baseline.
		if perLayer == 0 {
			perLayer = float64(cluster.LiveHeap()-before) / layers
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perLayer, "heap-B/layer") // with its three releases
}
