package environments_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// BenchmarkStatus reads what runs where on a hub's 500 clusters, 250 in
// staging and 250 in prod, each with 52 rollouts (2 live, 50 settled):
// staging 10 commits ahead of prod. What a GET /environments computes
// once it has the histories (engine's BenchmarkHistories).
func BenchmarkStatus(b *testing.B) {
	const clusters, depth, ahead = 500, 52, 10
	var names []string
	hist := map[string]environments.History{}
	var stg, prod []string
	for i := range clusters {
		name := fmt.Sprintf("prod-%03d", i)
		skip := ahead
		if i%2 == 0 {
			name, skip = fmt.Sprintf("stg-%03d", i), 0
			stg = append(stg, name)
		} else {
			prod = append(prod, name)
		}
		names = append(names, name)
		var h environments.History
		for j := skip; j < skip+depth; j++ {
			n := 1000 - j
			hash := fmt.Sprintf("%040x", n)
			at := t0.Add(time.Duration(n) * time.Hour)
			end := at.Add(time.Minute)
			h.Rollouts = append(h.Rollouts, &rollout.View{Cluster: name, Hash: hash, Revision: "main@sha1:" + hash,
				Verdict: rollout.VerdictApplied, Terminal: true, FirstSeen: at, CompletedAt: &end})
		}
		h.Cut = true
		hist[name] = h
	}
	declared := []environments.Declared{{Name: "staging", Clusters: stg}, {Name: "prod", Clusters: prod}}
	m, _ := environments.New(declared, nil)
	b.ReportAllocs()
	for b.Loop() {
		st := m.Status(names, hist)
		if len(st.Between[0].Commits) != ahead {
			b.Fatalf("%d commits between, want %d", len(st.Between[0].Commits), ahead)
		}
	}
}
