package engine_test

import (
	"context"
	"fmt"
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
func BenchmarkSubmit(b *testing.B) {
	e := enginetest.Start(b, b.TempDir(), defaultConfig(), fixedClock(t0), true)
	obs := benchObservations(b.N)
	var next atomic.Int64
	b.SetParallelism(32) // notification-controller posts from many goroutines
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o := obs[next.Add(1)-1]
			if err := e.Submit(context.Background(), o); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(e.Stats().Observations.Load())/float64(max(1, e.Stats().Commits.Load())), "obs/commit")
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
			obs := widthObservations(b.N, width)
			var next atomic.Int64
			b.SetParallelism(16) // 32 submitters on 2 cores
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
			b.ReportMetric(float64(e.Stats().Observations.Load())/float64(max(1, e.Stats().Commits.Load())), "obs/commit")
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
