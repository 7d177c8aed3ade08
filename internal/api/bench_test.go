package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
)

// BenchmarkVerdictSettled is GET /verdict for a settled rollout of 85
// layers, through the router, without the network: what the service spends
// on one pipeline's question about an old commit.
func BenchmarkVerdictSettled(b *testing.B) {
	t0 := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	te := enginetest.Start(b, b.TempDir(), rollout.Config{StuckAfter: time.Hour, SettleAfter: time.Minute}, time.Now, true)
	var obs []rollout.Observation
	for rev := range 3 {
		for l := range 85 {
			obs = append(obs, rollout.Observation{
				Emitter:  rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: fmt.Sprintf("src-042-l%02d", l)},
				Revision: "main@sha1:" + enginetest.Hash(fmt.Sprint(rev)), Hash: enginetest.Hash(fmt.Sprint(rev)),
				At: t0.Add(time.Duration(rev)*time.Hour + time.Duration(l)*time.Second), Signal: rollout.SignalSucceeded,
				Reason: "ReconciliationSucceeded", Message: "Reconciliation finished in 2.31s, next run in 10m0s",
			})
		}
	}
	if err := te.SubmitAll(context.Background(), obs); err != nil {
		b.Fatal(err)
	}
	// A settle pass stops after 2 ms, which a busy machine can reach
	// before the two old revisions are settled: pass again until they are.
	for deadline := time.Now().Add(10 * time.Second); te.Live()[rollout.VerdictApplied] != 1 && time.Now().Before(deadline); {
		if err := te.Settle(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	h := routes(te.Engine)
	url := "/verdict?rev=" + enginetest.Hash("0")[:10]
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
	if w.Code != http.StatusOK || te.Live()[rollout.VerdictApplied] != 1 {
		b.Fatalf("status %d, live %v", w.Code, te.Live())
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
	}
}

// BenchmarkEnvironments is GET /environments on a hub's 500 clusters (250
// in staging, 250 in prod), each with 2 live rollouts and 50 settled ones
// on bbolt, staging 10 commits ahead: through the router, the JSON
// written, once the settled histories were loaded.
func BenchmarkEnvironments(b *testing.B) {
	const clusters, ahead = 500, 10
	t0 := time.Now().Add(-1000 * time.Hour).Truncate(time.Second)
	te := enginetest.Start(b, b.TempDir(), rollout.Config{StuckAfter: time.Hour, Retention: 100000 * time.Hour}, time.Now, false)
	var live []*rollout.View
	var stg, prod []string
	for c := range clusters {
		name, skip := fmt.Sprintf("prod-%03d", c), ahead
		if c%2 == 0 {
			name, skip = fmt.Sprintf("stg-%03d", c), 0
			stg = append(stg, name)
		} else {
			prod = append(prod, name)
		}
		var settled []*rollout.View
		for i := skip; i < skip+engine.HistoryDepth+2; i++ {
			n := 1000 - i
			hash := enginetest.Hash(fmt.Sprint(n))
			at := t0.Add(time.Duration(n) * time.Hour)
			end := at.Add(time.Minute)
			v := &rollout.View{Cluster: name, Hash: hash, Revision: "main@sha1:" + hash, Verdict: rollout.VerdictApplied, Terminal: true,
				Subject: "Bump web to v1.4.2 (#412)", FirstSeen: at, LastSeen: end, CompletedAt: &end}
			if i < skip+2 {
				live = append(live, v)
			} else {
				settled = append(settled, v)
			}
		}
		if err := te.DB.Commit(&rollout.Batch{Settle: settled, At: t0}); err != nil {
			b.Fatal(err)
		}
	}
	te.Publish(live, nil, false)
	m, _ := environments.New([]environments.Declared{{Name: "staging", Clusters: stg}, {Name: "prod", Clusters: prod}}, nil)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := server.Routes(server.Parts{API: api.New(te.Engine, log, api.Options{Environments: func() api.Placement { return api.Placement{Map: m} }})})
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/environments", nil))
		return w
	}
	var body api.EnvironmentsResponse
	if w := get(); w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil || len(body.Between) != 1 || len(body.Between[0].Commits) != ahead {
		b.Fatalf("status %d: %.300s", w.Code, w.Body.String())
	}
	// Cached: nothing changed since the last answer. Changed: a live
	// rollout's view changed before each (an event came), so each answer
	// is made afresh.
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			get()
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v := *live[0]
			te.Publish([]*rollout.View{&v}, nil, false)
			get()
		}
	})
}
