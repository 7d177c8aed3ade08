package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/procstat"
)

// BenchmarkServeClusterFleet runs the real binary as the Deployment runs it
// (GOMEMLIMIT=192MiB, cluster access with the ClusterRole's rules) against
// the fleet of make bench-fleet on the test kube-apiserver: 100
// GitRepositories with 85 Kustomizations each (8,500 layers), every one
// with 100 objects in its inventory and its status as kustomize-controller
// writes it, its source's current revision applied. It reports the time to
// ready (caches synced), the time until every source's revision reads
// applied from the cluster alone, and the memory then: the resident set,
// its peak since start, the anonymous part, and the Go heap in use.
func BenchmarkServeClusterFleet(b *testing.B) {
	const sources, perSource = 100, 85
	c := clustertest.Start(b)
	bind(b, c, "fdn-reader")
	kubeconfig := c.KubeconfigFor(b, "fdn-reader")
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const ns = "fleet"
	if _, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}},
		metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second).Format(time.RFC3339)
	revs := make([]string, sources)
	for i := range revs {
		sum := sha1.Sum(fmt.Appendf(nil, "fleet-%d", i))
		revs[i] = "main@sha1:" + hex.EncodeToString(sum[:])
	}
	create := func(kind string, obj, status map[string]any) error {
		res := dc.Resource(cluster.Resource(kind)).Namespace(ns)
		got, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		got.Object["status"] = status
		_, err = res.UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	}
	for i, rev := range revs {
		if err := create(flux.KindGitRepository, map[string]any{
			"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": flux.KindGitRepository,
			"metadata": map[string]any{"name": fmt.Sprintf("src-%03d", i)},
			"spec":     map[string]any{"interval": "1m", "url": "https://example.com/fleet.git"},
		}, map[string]any{"artifact": map[string]any{"revision": rev, "lastUpdateTime": at, "path": "x", "url": "http://x",
			"digest": "sha256:9f8e4c6b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f"}}); err != nil {
			b.Fatal(err)
		}
	}
	layers := make(chan [2]int)
	var wg sync.WaitGroup
	var failed sync.Once
	var createErr error
	for range 8 {
		wg.Go(func() {
			for l := range layers {
				obj, status := fleetLayer(l[0], l[1], revs[l[0]])
				if err := create(flux.KindKustomization, obj, status); err != nil {
					failed.Do(func() { createErr = err })
				}
			}
		})
	}
	for s := range sources {
		for l := range perSource {
			layers <- [2]int{s, l}
		}
	}
	close(layers)
	wg.Wait()
	if createErr != nil {
		b.Fatal(createErr)
	}
	bin := buildBinary(b)

	for b.Loop() {
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--data-dir", b.TempDir(),
			"--kubeconfig", kubeconfig, "--log-format", "text")
		cmd.Env = []string{"GOMEMLIMIT=192MiB"}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Only the process this benchmark started, by its PID, also when
		// it fails half-way.
		stop := sync.OnceFunc(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		b.Cleanup(stop)
		url := readListening(b, stdout)
		deadline := time.Now().Add(5 * time.Minute)
		for !fleetPoll(url+"/readyz", "") {
			if time.Now().After(deadline) {
				b.Fatal("not ready in 5 minutes")
			}
			time.Sleep(50 * time.Millisecond)
		}
		ready := time.Since(start)
		for _, rev := range revs {
			for !fleetPoll(url+"/verdict?rev="+rev, `"verdict":"applied"`) {
				if time.Now().After(deadline) {
					b.Fatalf("%s not applied in 5 minutes", rev)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		applied := time.Since(start)
		rss, peak, anon := procstat.Memory(cmd.Process.Pid)
		heap := fleetHeap(b, url)
		stop()
		b.ReportMetric(ready.Seconds(), "ready-s")
		b.ReportMetric(applied.Seconds(), "applied-s")
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(peak, "peak-rss-MiB")
		b.ReportMetric(anon, "anon-MiB")
		b.ReportMetric(heap, "heap-MiB")
	}
}

// fleetLayer is layer l of source s, depending on the layer before it, as
// kustomize-controller leaves it once it applied rev.
func fleetLayer(s, l int, rev string) (obj, status map[string]any) {
	const objects = 100
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second).Format(time.RFC3339)
	entries := make([]any, objects)
	for j := range entries {
		entries[j] = map[string]any{"id": fmt.Sprintf("app-%03d-%02d_web-%d_apps_Deployment", s, l, j), "v": "v1"}
	}
	spec := map[string]any{"interval": "10m", "path": fmt.Sprintf("./app-%02d", l), "prune": true, "wait": true,
		"sourceRef": map[string]any{"kind": flux.KindGitRepository, "name": fmt.Sprintf("src-%03d", s)}}
	if l > 0 {
		spec["dependsOn"] = []any{map[string]any{"name": fmt.Sprintf("src-%03d-layer-%02d", s, l-1)}}
	}
	obj = map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": flux.KindKustomization,
		"metadata": map[string]any{"name": fmt.Sprintf("src-%03d-layer-%02d", s, l)}, "spec": spec,
	}
	status = map[string]any{
		"observedGeneration": int64(1), "lastAppliedRevision": rev, "lastAttemptedRevision": rev, "lastHandledReconcileAt": at,
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: " + rev, "lastTransitionTime": at},
			map[string]any{"type": "Healthy", "status": "True", "reason": "Succeeded", "message": "Health check passed in 2.1s", "lastTransitionTime": at},
		},
		"history": []any{map[string]any{"digest": "sha256:" + strings.Repeat("1", 64), "firstReconciled": at, "lastReconciled": at,
			"lastReconciledDuration": "2.1s", "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": int64(3),
			"metadata": map[string]any{"revision": rev}}},
		"inventory": map[string]any{"entries": entries},
	}
	return obj, status
}

// fleetPoll reports whether url answers 200 with body containing want.
func fleetPoll(url, want string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		sb.WriteString(sc.Text())
	}
	return resp.StatusCode == http.StatusOK && strings.Contains(sb.String(), want)
}

// fleetHeap is the service's Go heap in use, in MiB.
func fleetHeap(b *testing.B, url string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f / (1 << 20)
		}
	}
	b.Fatal("no go_memstats_heap_inuse_bytes in /metrics")
	return 0
}
