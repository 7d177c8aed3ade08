package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/procstat"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
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

// BenchmarkServeRegisteredClusters sizes a hub that reads clusters
// registered as Secrets: the real binary reads its own cluster and N
// registered ones, each a Secret whose kubeconfig (a user bound to the
// reader's rules alone) reaches the test kube-apiserver, which holds one
// cluster's worth of Flux objects (a GitRepository, 85 Kustomizations
// each with 100 objects in its inventory, 192 HelmReleases): every
// registered cluster is read by a reader and caches of its own, as N real
// clusters would be, its rollouts under its own name. On PostgreSQL two
// replicas share the clusters out, each engine holding every cluster's
// rollouts. It reports the time until every cluster is read
// (fdn_cluster_up 1 for each) and the CPU time the replicas and the API
// server took until then, the time a Secret added then takes to be read,
// /verdict's p99 over the clusters' rollouts, and the memory then (of the
// larger replica): resident set, the anonymous part and the Go heap, and
// the anonymous part over the clusters it reads. Then a commit rolls out
// on every cluster, told by its events and its status together: the time
// until all read applied, the anonymous memory at its most meanwhile, and
// the peak resident set of the whole run. FDN_BENCH_GOMEMLIMIT sets the
// processes' GOMEMLIMIT, as a Deployment's limit would; FDN_BENCH_BINARY
// measures another build.
func BenchmarkServeRegisteredClusters(b *testing.B) {
	for _, c := range []struct{ clusters, replicas int }{{25, 1}, {100, 1}, {500, 1}, {1000, 2}} {
		b.Run(fmt.Sprintf("clusters=%d/replicas=%d", c.clusters, c.replicas), func(b *testing.B) { benchRegistered(b, c.clusters, c.replicas) })
	}
}

func benchRegistered(b *testing.B, n, replicas int) {
	const perCluster = 85
	c := clustertest.Start(b)
	bind(b, c, "fdn-reader")
	readerKubeconfig, err := os.ReadFile(c.KubeconfigFor(b, "fdn-reader"))
	if err != nil {
		b.Fatal(err)
	}
	w := c.NewWorld(b, "fleet", time.Now().UTC().Truncate(time.Second))
	sum := sha1.Sum([]byte("registered"))
	rev := "main@sha1:" + hex.EncodeToString(sum[:])
	w.Source("src", rev)
	for l := range perCluster {
		layer := clustertest.FleetLayer{Name: fmt.Sprintf("layer-%02d", l), Source: "src", Rev: rev, Objects: 100, History: 1}
		if l > 0 {
			layer.After = fmt.Sprintf("layer-%02d", l-1)
		}
		if err := w.CreateFleetLayer(layer); err != nil {
			b.Fatal(err)
		}
		// As in make bench-fleet, three HelmReleases in each application
		// layer (one no other layer depends on: 64 of the 85).
		if 4*l+1 >= perCluster {
			for i := range 3 {
				if err := w.CreateFleetRelease(clustertest.FleetRelease{Name: fmt.Sprintf("layer-%02d-release-%d", l, i), Layer: layer.Name, Version: "1.0.0"}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	c.ApplyYAML(b, "apiVersion: v1\nkind: Namespace\nmetadata: {name: fdn-hub}\n")
	register := func(name string) { registerCluster(b, c, "fdn-hub", name, string(readerKubeconfig)) }
	for i := range n {
		register(fmt.Sprintf("c%04d", i))
	}
	// FDN_BENCH_BINARY measures another build (an earlier release's) in
	// the same run.
	bin := os.Getenv("FDN_BENCH_BINARY")
	if bin == "" {
		bin = buildBinary(b, false)
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--kubeconfig", c.Kubeconfig, "--namespaces", "fleet",
		"--cluster-secrets-namespace", "fdn-hub", "--default-cluster", "hub", "--log-format", "text"}
	// FDN_BENCH_ARGS adds flags (--debug-listen, to profile a start).
	args = append(args, strings.Fields(os.Getenv("FDN_BENCH_ARGS"))...)
	if replicas > 1 {
		args = append(args, "--postgres", pgtest.Start(b).NewDatabase(b), "--lease-duration", "10s", "--lease-renew", "2s",
			"--mail-dir", b.TempDir())
	}

	for b.Loop() {
		type hub struct {
			url string
			pid int
		}
		var hubs []hub
		var stops []func()
		var logs syncbuf.Buffer
		b.Cleanup(func() {
			if b.Failed() {
				b.Log(tail(logs.String(), 20))
			}
			// FDN_BENCH_LOGS keeps the replicas' logs whole, in that file.
			if path := os.Getenv("FDN_BENCH_LOGS"); path != "" {
				_ = os.WriteFile(path, []byte(logs.String()), 0o644)
			}
		})
		start, apiCPU := time.Now(), procstat.CPU(c.APIServerPID())
		for range replicas {
			cmd := exec.Command(bin, append(args, "--data-dir", b.TempDir())...)
			if limit := os.Getenv("FDN_BENCH_GOMEMLIMIT"); limit != "" {
				cmd.Env = append(os.Environ(), "GOMEMLIMIT="+limit)
			}
			cmd.Stderr = &logs
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			// Only the processes this benchmark started, by their PIDs.
			stop := sync.OnceFunc(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			b.Cleanup(stop)
			stops = append(stops, stop)
			hubs = append(hubs, hub{readListening(b, stdout), cmd.Process.Pid})
		}
		// Each replica reads its own cluster and its share of the others.
		up := func() int {
			total := 0
			for _, h := range hubs {
				total += fleetUp(b, h.url)
			}
			return total
		}
		deadline := time.Now().Add(10 * time.Minute)
		for up() < n+replicas {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d clusters read in 10 minutes", up(), n+replicas)
			}
			time.Sleep(100 * time.Millisecond)
		}
		allRead := time.Since(start)
		// Where the start's CPU time went: the replicas' own (the most
		// of one), and the one API server's, which serves every cluster
		// here on the same cores.
		var hubCPU time.Duration
		for _, h := range hubs {
			hubCPU = max(hubCPU, procstat.CPU(h.pid))
		}
		apiCPU = procstat.CPU(c.APIServerPID()) - apiCPU
		url := hubs[0].url
		// Every cluster's rollout, judged from its state.
		for i := range n {
			for !fleetPoll(fmt.Sprintf("%s/verdict?cluster=c%04d&rev=%s", url, i, rev), `"verdict":"applied"`) {
				if time.Now().After(deadline) {
					b.Fatalf("c%04d's rollout not applied in 10 minutes", i)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		var rss, peak, anon, heap float64
		for _, h := range hubs {
			r, p, a := procstat.Memory(h.pid)
			rss, peak, anon, heap = max(rss, r), max(peak, p), max(anon, a), max(heap, fleetHeap(b, h.url))
		}
		var lat []time.Duration
		for i := range 2000 {
			t0 := time.Now()
			if !fleetPoll(fmt.Sprintf("%s/verdict?cluster=c%04d&rev=%s", url, i%n, rev), `"verdict":"applied"`) {
				b.Fatal("a verdict not applied")
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		added := time.Now()
		register(fmt.Sprintf("late-%d", added.UnixNano()))
		for up() < n+replicas+1 {
			if time.Now().After(deadline) {
				b.Fatal("the Secret added not read in 10 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		addedIn := time.Since(added)

		// A commit rolls out on every cluster at once, told both ways: the
		// events each cluster's notification-controller posts (its name in
		// their metadata), and the statuses each reader watches change,
		// inventories whole. Until every cluster's rollout reads applied,
		// the replicas' memory is sampled: readers and events together.
		sum2 := sha1.Sum([]byte("registered, the next commit"))
		hash2 := hex.EncodeToString(sum2[:])
		rolling := time.Now()
		var anonRolling float64
		sample := func() {
			for _, h := range hubs {
				_, _, a := procstat.Memory(h.pid)
				anonRolling = max(anonRolling, a)
			}
		}
		var (
			acks    []time.Duration
			retries int
		)
		posted := make(chan error, 1)
		go func() {
			var err error
			acks, retries, err = postRollout(hubs[0].url, "main@sha1:"+hash2, n, perCluster)
			posted <- err
		}()
		w.SetArtifact("src", "main@sha1:"+hash2, rolling)
		for l := range perCluster {
			layer := clustertest.FleetLayer{Name: fmt.Sprintf("layer-%02d", l), Source: "src", Rev: "main@sha1:" + hash2, Objects: 100, History: 1}
			if err := w.ApplyFleetLayer(layer, rolling); err != nil {
				b.Fatal(err)
			}
			sample()
		}
		if err := <-posted; err != nil {
			b.Fatal(err)
		}
		for i := range n {
			for !fleetPoll(fmt.Sprintf("%s/verdict?cluster=c%04d&rev=%s", url, i, hash2), `"verdict":"applied"`) {
				if time.Now().After(deadline.Add(10 * time.Minute)) {
					b.Fatalf("c%04d's second rollout not applied in 10 minutes", i)
				}
				sample()
				time.Sleep(50 * time.Millisecond)
			}
		}
		rolled := time.Since(rolling)
		sample()
		for _, h := range hubs {
			_, p, _ := procstat.Memory(h.pid)
			peak = max(peak, p)
		}
		for _, stop := range stops {
			stop()
		}
		b.ReportMetric(allRead.Seconds(), "all-read-s")
		b.ReportMetric(hubCPU.Seconds(), "replica-cpu-s")
		b.ReportMetric(apiCPU.Seconds(), "apiserver-cpu-s")
		b.ReportMetric(addedIn.Seconds(), "added-read-s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "verdict-p99-ms")
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(peak, "peak-rss-MiB")
		b.ReportMetric(anon, "anon-MiB")
		b.ReportMetric(heap, "heap-MiB")
		b.ReportMetric(anon/float64(n/replicas+1), "anon-MiB/cluster-read")
		b.ReportMetric(rolled.Seconds(), "rollout-s")
		b.ReportMetric(anonRolling, "anon-rolling-MiB")
		b.ReportMetric(float64(acks[len(acks)*99/100].Microseconds())/1000, "rollout-ack-p99-ms")
		b.ReportMetric(float64(acks[len(acks)-1].Microseconds())/1000, "rollout-ack-max-ms")
		b.ReportMetric(float64(retries), "rollout-retries")
	}
}

// postRollout posts, to the webhook at url, the events n registered
// clusters' notification-controllers send of a commit rolling out across
// their layers (c0000 to c<n-1>, layer-00 to layer-<layers-1>, each
// depending on the one before): the source's new artifact, then per
// layer DependencyNotReady, Progressing and ReconciliationSucceeded. From
// 32 connections, each a cluster's events in order. An event not
// acknowledged (a 503, a connection closed) is posted again a second
// later, as notification-controller retries; it returns the times to
// acknowledgement and the number of retries.
func postRollout(url, rev string, n, layers int) (acks []time.Duration, retries int, err error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	now := time.Now().UTC()
	event := func(cluster, kind, name, reason, msg string) loadkit.Event {
		apiVersion, controller := "kustomize.toolkit.fluxcd.io/v1", "kustomize-controller"
		if kind == flux.KindGitRepository {
			apiVersion, controller = "source.toolkit.fluxcd.io/v1", "source-controller"
		}
		return loadkit.Signed(nil, flux.Event{
			InvolvedObject: flux.ObjectRef{Kind: kind, Namespace: "fleet", Name: name, APIVersion: apiVersion},
			Severity:       "info", Timestamp: now.Format(time.RFC3339), Message: msg, Reason: reason,
			Metadata: map[string]string{"revision": rev, "cluster": cluster}, ReportingController: controller,
		})
	}
	type result struct {
		acks    []time.Duration
		retries int
		err     error
	}
	clusters := make(chan int)
	results := make(chan result, 32)
	for range 32 {
		go func() {
			var r result
			defer func() { results <- r }()
			for i := range clusters {
				cluster := fmt.Sprintf("c%04d", i)
				evs := []loadkit.Event{event(cluster, flux.KindGitRepository, "src", "NewArtifact", "stored artifact for commit 'Next'")}
				for l := range layers {
					name := fmt.Sprintf("layer-%02d", l)
					if l > 0 {
						evs = append(evs, event(cluster, flux.KindKustomization, name, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s"))
					}
					evs = append(evs, event(cluster, flux.KindKustomization, name, "Progressing", "Deployment/apps/web configured"),
						event(cluster, flux.KindKustomization, name, "ReconciliationSucceeded", "Reconciliation finished in 2.31s, next run in 10m0s"))
				}
				for _, ev := range evs {
					for attempt := 0; ; attempt++ {
						t0 := time.Now()
						status, err := loadkit.Post(client, url+"/webhook", ev)
						if err == nil && status == http.StatusAccepted {
							r.acks = append(r.acks, time.Since(t0))
							break
						}
						if attempt == 10 {
							r.err = fmt.Errorf("post %s's event, 10 retries: %d %v", cluster, status, err)
							return
						}
						r.retries++
						time.Sleep(time.Second) // notification-controller's retry, not a wait for a state
					}
				}
			}
		}()
	}
	go func() {
		defer close(clusters)
		for i := range n {
			clusters <- i
		}
	}()
	for range 32 {
		r := <-results
		acks, retries = append(acks, r.acks...), retries+r.retries
		if r.err != nil && err == nil {
			err = r.err
		}
	}
	slices.Sort(acks)
	return acks, retries, err
}

// fleetUp counts the clusters /metrics says are read.
func fleetUp(b *testing.B, url string) int {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "fdn_cluster_up{") && strings.HasSuffix(line, " 1") {
			n++
		}
	}
	return n
}
