package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// benchObservations is what a busy cluster produces: 20 layers moving
// through revisions, each waiting, progressing, passing health checks and
// succeeding.
func benchObservations(n int) []rollout.Observation {
	out := make([]rollout.Observation, 0, n)
	for rev := 0; len(out) < n; rev++ {
		label := fmt.Sprintf("bench-%d", rev)
		for l := 0; l < 20 && len(out) < n; l++ {
			name := fmt.Sprintf("tenant-%02d", l)
			sec := rev*60 + l*2
			out = append(out,
				waiting(name, label, sec), prog(name, label, sec+1),
				ob(name, label, sec+1, rollout.SignalProgressing, "Progressing", "Health check passed in 2.04s"),
				succ(name, label, sec+2))
		}
	}
	return out[:n]
}

// BenchmarkSubmit measures durable ingest through the engine alone: merge,
// verdicts, and a bbolt group commit before each acknowledgement.
func BenchmarkSubmit(b *testing.B) { submit(b, defaultConfig()) }

// BenchmarkSubmitPublished is BenchmarkSubmit with a forge configured:
// each batch that changes a verdict writes it to the forge outbox, a bbolt
// commit rather than the write-ahead log.
func BenchmarkSubmitPublished(b *testing.B) {
	cfg := defaultConfig()
	cfg.Publish = true
	submit(b, cfg)
}

func submit(b *testing.B, cfg rollout.Config) {
	e := enginetest.Start(b, b.TempDir(), cfg, fixedClock(t0), true)
	b.ReportAllocs()
	submitters(b, e, benchObservations(b.N), 32) // notification-controller posts from many goroutines
}

// submitters times obs submitted to e from parallelism goroutines a core,
// and reports the observations a commit took meanwhile.
func submitters(b *testing.B, e *enginetest.Engine, obs []rollout.Observation, parallelism int) {
	var next atomic.Int64
	st := e.Stats()
	obs0, commits0 := st.Observations.Load(), st.Commits.Load()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Submit(context.Background(), obs[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(st.Observations.Load()-obs0)/float64(max(1, st.Commits.Load()-commits0)), "obs/commit")
}

// widthObservations rolls revisions across width layers: each layer waits
// on its dependency, progresses and succeeds.
func widthObservations(n, width int) []rollout.Observation {
	out := make([]rollout.Observation, 0, n)
	for rev := 0; len(out) < n; rev++ {
		label := fmt.Sprintf("width-%d-%d", width, rev)
		for l := 0; l < width && len(out) < n; l++ {
			name := fmt.Sprintf("layer-%04d", l)
			sec := rev*600 + l/10
			out = append(out, waiting(name, label, sec), prog(name, label, sec+1), succ(name, label, sec+2))
		}
	}
	return out[:n]
}

// BenchmarkSubmitWidth is BenchmarkSubmit with revisions rolling across 50
// and 1,000 layers: the cost of an observation must not grow with the
// width of its rollout.
func BenchmarkSubmitWidth(b *testing.B) {
	for _, width := range []int{50, 1000} {
		b.Run(fmt.Sprintf("layers=%d", width), func(b *testing.B) {
			e := enginetest.Start(b, b.TempDir(), defaultConfig(), fixedClock(t0), true)
			submitters(b, e, widthObservations(b.N, width), 16) // 32 submitters on 2 cores
		})
	}
}

// BenchmarkReload measures a restart: rebuilding every rollout from the store.
func BenchmarkReload(b *testing.B) {
	dir := b.TempDir()
	h := start(b, dir, defaultConfig(), fixedClock(t0.Add(time.Hour)))
	h.submitConcurrently(benchObservations(20000))
	h.stop()
	b.ResetTimer()
	for b.Loop() {
		enginetest.Start(b, dir, defaultConfig(), fixedClock(t0.Add(time.Hour)), false).Stop()
	}
}

// BenchmarkLookupSettled measures /verdict's read of a settled rollout of
// 85 layers among 2,000: index seeks, inflate and decode.
func BenchmarkLookupSettled(b *testing.B) {
	h := start(b, b.TempDir(), settleConfig(time.Minute), fixedClock(t0.Add(1000*time.Hour)))
	obs := widthObservations(2000*85*3, 85)
	for i := 0; i < len(obs); i += 1000 {
		if err := h.engine.SubmitAll(context.Background(), obs[i:min(i+1000, len(obs))]); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, h.engine)
	q := engine.Query{Hash: hashOf("width-85-7")}
	if v, err := h.engine.Lookup(q); err != nil || v.Layers.Len() != 85 {
		b.Fatalf("%v %v", v, err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.engine.Lookup(q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupLive finds one of 3,000 live rollouts by its hash: the
// snapshot's index, not a scan of every live view.
func BenchmarkLookupLive(b *testing.B) {
	h := start(b, b.TempDir(), settleConfig(never), fixedClock(t0))
	obs := widthObservations(3000*2*3, 2)
	for i := 0; i < len(obs); i += 1000 {
		if err := h.engine.SubmitAll(context.Background(), obs[i:min(i+1000, len(obs))]); err != nil {
			b.Fatal(err)
		}
	}
	q := engine.Query{Hash: hashOf("width-2-1234")}
	live := 0
	for _, n := range h.engine.Live() {
		live += n
	}
	if v, err := h.engine.Lookup(q); err != nil || v.Layers.Len() != 2 || live != 3000 {
		b.Fatalf("%v %v, %d live", v, err, live)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.engine.Lookup(q); err != nil {
			b.Fatal(err)
		}
	}
}

// fleetObservations is what one source of the fleet benchmark produces for
// revs commits: each rolls across width layers in dependsOn order (layer i
// depends on (i-1)/4), which first wait, then progress and succeed; in
// every layer no other depends on, its apply changes releases
// HelmReleases, released after it, as make bench-fleet's. Every string is
// its own copy, as each decoded event's are.
func fleetObservations(source string, revs, width, releases int) []rollout.Observation {
	own := func(s string) string { return strings.Clone(s) }
	var out []rollout.Observation
	for k := range revs {
		label := fmt.Sprintf("%s-%d", source, k)
		for l := range width {
			name := fmt.Sprintf("%s-l%02d", source, l)
			sec := k*3600 + l
			o := func(sec int, sig rollout.Signal, reason, msg string) rollout.Observation {
				return rollout.Observation{
					Emitter:  rollout.Emitter{Role: rollout.RoleLayer, Kind: own("Kustomization"), Namespace: own("flux-system"), Name: own(name)},
					Revision: own(revOf(label)), Hash: own(hashOf(label)), At: t0.Add(time.Duration(sec) * time.Second),
					Signal: sig, Reason: own(reason), Message: own(msg),
				}
			}
			if l > 0 {
				out = append(out, o(sec, rollout.SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s"))
			}
			prog := o(sec+30, rollout.SignalProgressing, "Progressing", fmt.Sprintf("Deployment/%s/web configured\nConfigMap/%s/settings-%d created", name, name, k))
			var hrs []rollout.Observation
			if 4*l+1 >= width {
				for i := range releases {
					em := rollout.Emitter{Role: rollout.RoleRelease, Kind: own("HelmRelease"), Namespace: own(name), Name: own(fmt.Sprintf("release-%d", i))}
					prog.Holds = append(prog.Holds, em)
					hrs = append(hrs, rollout.Observation{Emitter: em, At: t0.Add(time.Duration(sec+33) * time.Second), Signal: rollout.SignalSucceeded,
						Reason: own("UpgradeSucceeded"), Message: fmt.Sprintf("Helm upgrade succeeded for release %s/release-%d.v%d with chart web@1.0.0", name, i, k+2)})
				}
			}
			out = append(out, prog,
				o(sec+32, rollout.SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished in 2.31s, next run in 10m0s"))
			out = append(out, hrs...)
		}
	}
	return out
}

// BenchmarkLiveHeap measures what the live set costs in memory: the heap
// left after a collection, per layer of a live rollout, for 20 sources of
// 85 layers with 3 live rollouts each (none settles: the clock stands
// still). The fleet's memory is about this times its live layers.
func BenchmarkLiveHeap(b *testing.B) {
	b.Run("releases=0", func(b *testing.B) { liveHeap(b, 0) })
	b.Run("releases=3", func(b *testing.B) { liveHeap(b, 3) })
}

// liveHeap measures with releases HelmReleases in each application layer
// (64 of the 85): per layer still, the releases' cost spread over them.
func liveHeap(b *testing.B, releases int) {
	const sources, width, revs = 20, 85, 3
	var perLayer float64
	for b.Loop() {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		var obs [][]rollout.Observation
		for s := range sources {
			obs = append(obs, fleetObservations(fmt.Sprintf("src-%03d", s), revs, width, releases))
		}
		b.StartTimer()
		e := enginetest.Start(b, b.TempDir(), defaultConfig(), fixedClock(t0), false)
		for _, o := range obs {
			for i := 0; i < len(o); i += 500 {
				if err := e.SubmitAll(context.Background(), o[i:min(i+500, len(o))]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		obs = nil
		// Twice: pooled buffers (bbolt's pages, flate writers) outlive one
		// collection, and are a cache, not the live set.
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLayer = float64(after.HeapAlloc-before.HeapAlloc) / (sources * width * revs)
		if v, err := e.Lookup(engine.Query{Hash: hashOf("src-000-2")}); err != nil || v.Layers.Len() != width || v.Verdict != rollout.VerdictApplied {
			b.Fatalf("rollout src-000-2: %+v %v", v, err)
		}
		runtime.KeepAlive(e)
		e.Stop()
		b.StartTimer()
	}
	b.ReportMetric(perLayer, "live-B/layer")
}

// streamObservation is event i of the reference load stream
// (../shared/tools/fdnload, docs/performance.md): each revision rolls
// across width layers, three events a layer (Progressing naming objects
// of other namespaces, the health check, ReconciliationSucceeded), a
// thousand events a second of event time, stamped to the whole second as
// Flux stamps them: many revisions share a second on one layer. Its
// indexes start where fdnload's runs start, and so do its times (i is
// taken modulo a million), so that a later run's revisions are stamped
// among an earlier run's.
func streamObservation(i, width int) rollout.Observation {
	rev, k := i/(3*width), i%(3*width)
	l, step := k/3, k%3
	label := fmt.Sprintf("stream-%d", rev)
	name := fmt.Sprintf("layer-%03d", l)
	sec := (i % 1_000_000) / 1000
	switch step {
	case 0:
		return ob(name, label, sec, rollout.SignalProgressing, "Progressing",
			fmt.Sprintf("ConfigMap/team-%d/settings configured\nDeployment/team-%d/web configured", l, l))
	case 1:
		return ob(name, label, sec, rollout.SignalProgressing, "Progressing", fmt.Sprintf("Health check passed in %d.%03ds", i%7, i%1000))
	}
	return ob(name, label, sec, rollout.SignalSucceeded, "ReconciliationSucceeded",
		fmt.Sprintf("Reconciliation finished in %d.%03ds, next run in 10m0s", i%5, i%1000))
}

// streamRange is events [from, from+n) of the reference stream.
func streamRange(from, n, width int) []rollout.Observation {
	out := make([]rollout.Observation, n)
	for i := range out {
		out[i] = streamObservation(from+i, width)
	}
	return out
}

// BenchmarkSubmitStream submits the reference stream from 32 goroutines,
// as its ack-latency run does, at 20 and 1,000 layers a revision: on an
// engine that saw only fdnload's warm-up (fresh), and on one that took a
// burst before (burst: 60,000 events of its own, stamped over the same
// minute). The cost of an event must depend on neither the width nor the
// rollouts the burst left.
func BenchmarkSubmitStream(b *testing.B) {
	for _, burst := range []int{0, 60_000} {
		for _, width := range []int{20, 1000} {
			name := fmt.Sprintf("fresh/layers=%d", width)
			if burst > 0 {
				name = fmt.Sprintf("burst/layers=%d", width)
			}
			b.Run(name, func(b *testing.B) {
				e := enginetest.Start(b, b.TempDir(), defaultConfig(), fixedClock(t0.Add(10*time.Minute)), true)
				before := streamRange(0, 4000, width)
				if burst > 0 {
					before = append(before, streamRange(2_000_000, burst, width)...)
				}
				for i := 0; i < len(before); i += 500 {
					if err := e.SubmitAll(context.Background(), before[i:min(i+500, len(before))]); err != nil {
						b.Fatal(err)
					}
				}
				obs := streamRange(3_000_000, b.N, width)
				b.ReportAllocs()
				submitters(b, e, obs, 16) // 32 submitters on 2 cores
			})
		}
	}
}

// TestStreamVerified runs what BenchmarkSubmitStream measures, smaller,
// with every incremental evaluation checked against the reference after
// every batch (enginetest.Start turns Verify on in tests): revisions
// stamped among older ones, many to a second, their layers' reports
// arriving out of order within a batch.
func TestStreamVerified(t *testing.T) {
	for _, width := range []int{20, 200} {
		t.Run(fmt.Sprintf("layers=%d", width), func(t *testing.T) {
			e := enginetest.Start(t, t.TempDir(), defaultConfig(), fixedClock(t0.Add(10*time.Minute)), true)
			obs := append(streamRange(0, 2000, width), streamRange(2_000_000, 3000, width)...)
			obs = append(obs, streamRange(3_000_000, 3000, width)...)
			for i := 0; i < len(obs); i += 37 {
				batch := slices.Clone(obs[i:min(i+37, len(obs))])
				slices.Reverse(batch) // the reports of a batch in another order than Flux's
				if err := e.SubmitAll(context.Background(), batch); err != nil {
					t.Fatal(err)
				}
			}
			// Each run's first revision, stamped the same second on each
			// layer as the other two: ties ordered by hash, the burst's
			// comes between the others and was replaced before it
			// completed.
			for _, want := range []struct {
				from    int
				verdict rollout.Verdict
			}{{0, rollout.VerdictApplied}, {2_000_000, rollout.VerdictSuperseded}, {3_000_000, rollout.VerdictApplied}} {
				rev := want.from / (3 * width)
				v, err := e.Lookup(engine.Query{Hash: hashOf(fmt.Sprintf("stream-%d", rev))})
				if err != nil {
					t.Fatal(err)
				}
				if v.Layers.Len() != width || v.Verdict != want.verdict {
					t.Errorf("stream-%d: %s on %d layers, want %s on %d", rev, v.Verdict, v.Layers.Len(), want.verdict, width)
				}
			}
		})
	}
}
