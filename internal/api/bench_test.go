package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
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
