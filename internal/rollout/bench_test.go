package rollout_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout/rollouttest"
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
	e := rollouttest.Start(b, b.TempDir(), defaultConfig(), fixedClock(t0), true)
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

// BenchmarkReload measures a restart: rebuilding every rollout from the store.
func BenchmarkReload(b *testing.B) {
	dir := b.TempDir()
	h := start(b, dir, defaultConfig(), fixedClock(t0.Add(time.Hour)))
	h.submitConcurrently(benchObservations(20000))
	h.stop()
	b.ResetTimer()
	for b.Loop() {
		rollouttest.Start(b, dir, defaultConfig(), fixedClock(t0.Add(time.Hour)), false).Stop()
	}
}
