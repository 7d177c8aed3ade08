package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
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
	w := c.NewWorld(b, "fleet", time.Now().UTC().Truncate(time.Second))
	revs := make([]string, sources)
	for i := range revs {
		sum := sha1.Sum(fmt.Appendf(nil, "fleet-%d", i))
		revs[i] = "main@sha1:" + hex.EncodeToString(sum[:])
		w.Source(fmt.Sprintf("src-%03d", i), revs[i])
	}
	layers := make(chan clustertest.FleetLayer)
	var wg sync.WaitGroup
	var failed sync.Once
	var createErr error
	for range 8 {
		wg.Go(func() {
			for l := range layers {
				if err := w.CreateFleetLayer(l); err != nil {
					failed.Do(func() { createErr = err })
				}
			}
		})
	}
	for s, rev := range revs {
		for l := range perSource {
			layer := clustertest.FleetLayer{Name: fmt.Sprintf("src-%03d-layer-%02d", s, l), Source: fmt.Sprintf("src-%03d", s),
				Rev: rev, Objects: 100, History: 1}
			if l > 0 {
				layer.After = fmt.Sprintf("src-%03d-layer-%02d", s, l-1)
			}
			layers <- layer
		}
	}
	close(layers)
	wg.Wait()
	if createErr != nil {
		b.Fatal(createErr)
	}
	bin := buildBinary(b, false)

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

// fleetPoll reports whether url answers 200 with body containing want.
func fleetPoll(url, want string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), want)
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
