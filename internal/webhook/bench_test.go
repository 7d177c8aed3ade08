package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

func BenchmarkDecode(b *testing.B) {
	body := []byte(docBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := flux.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeJSON is what the load generator's bare handler does with
// the same body: encoding/json into flux.Event, without validation.
func BenchmarkDecodeJSON(b *testing.B) {
	body := []byte(docBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var ev flux.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandler is one webhook request without the network: size and
// HMAC checks, decoding, and the engine's durable commit before the 202.
func BenchmarkHandler(b *testing.B) {
	const token = "bench-token"
	e := newEnv(b, []byte(token))
	h := webhook.New([]byte(token), e.engine, nil, nil)
	bodies := make([][]byte, b.N)
	sigs := make([]string, b.N)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"layer-%d"},"severity":"info","timestamp":"2026-11-30T10:15:30Z","message":"Deployment/apps/web configured","reason":"Progressing","metadata":{"revision":"main@sha1:%040x"}}`, i%20, i/20)
		sigs[i] = signature.Sign([]byte(token), bodies[i])
	}
	var next atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(bodies[i]))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Signature", sigs[i])
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusAccepted {
				b.Errorf("status %d: %s", rec.Code, rec.Body)
				return
			}
		}
	})
}
