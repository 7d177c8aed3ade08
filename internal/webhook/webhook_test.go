package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

// An event as Flux marshals it, and the signature notification-controller
// computes over those bytes with token my-secret-token (docs/configuration.md, "The
// webhook").
const (
	docBody = `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps","uid":"7d0cdc51-ddcf-4743-b223-83ca5c699632","apiVersion":"kustomize.toolkit.fluxcd.io/v1","resourceVersion":"123456"},"severity":"info","timestamp":"2026-08-07T10:15:30Z","message":"Deployment/apps/webapp configured\nService/apps/webapp created","reason":"Progressing","metadata":{"revision":"main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"},"reportingController":"kustomize-controller","reportingInstance":"kustomize-controller-7c7b47f5f-8bhrp"}`
	docSig  = "sha256=561b3aecd8d71b9b08b7d44c996b4586540a4c32b346829e6d0eb9fa0eef8cfc"
)

func TestSignMatchesFlux(t *testing.T) {
	if got := signature.Sign([]byte("my-secret-token"), []byte(docBody)); got != docSig {
		t.Fatalf("Sign = %s, want %s", got, docSig)
	}
}

type env struct {
	url    string
	engine *engine.Engine
	db     *store.DB
}

func newEnv(t testing.TB, token []byte) *env {
	t.Helper()
	te := enginetest.Start(t, t.TempDir(), rollout.Config{StuckAfter: time.Hour}, time.Now, true)
	srv := httptest.NewServer(webhook.New(token, te.Engine, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, engine: te.Engine, db: te.DB}
}

func post(t *testing.T, url string, body []byte, header map[string]string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	if resp.StatusCode != http.StatusAccepted {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("status %d without a JSON error: %v", resp.StatusCode, err)
		}
	}
	return resp.StatusCode, out
}

func signed(token string, body string) map[string]string {
	return map[string]string{"X-Signature": signature.Sign([]byte(token), []byte(body))}
}

func TestAuthentication(t *testing.T) {
	const token = "my-secret-token"
	sha512sig := func(key, body string) string {
		m := hmac.New(sha512.New, []byte(key))
		m.Write([]byte(body))
		return "sha512=" + hex.EncodeToString(m.Sum(nil))
	}
	tests := []struct {
		name   string
		token  string
		header map[string]string
		want   int
	}{
		{"generic-hmac as Flux signs it", token, map[string]string{"X-Signature": docSig}, 202},
		{"sha512 signature", token, map[string]string{"X-Signature": sha512sig(token, docBody)}, 202},
		{"generic with bearer token", token, map[string]string{"Authorization": "Bearer " + token}, 202},
		{"bearer scheme is case-insensitive", token, map[string]string{"Authorization": "bearer " + token}, 202},
		{"token file with trailing newline keys the HMAC with it", token + "\n", signed(token+"\n", docBody), 202},
		{"token file with trailing newline, bearer without it", token + "\n", map[string]string{"Authorization": "Bearer " + token}, 202},
		{"HMAC without the newline the key has", token + "\n", map[string]string{"X-Signature": docSig}, 401},
		{"no credentials", token, nil, 401},
		{"wrong token", token, signed("other", docBody), 401},
		{"signature of another body", token, signed(token, docBody+" "), 401},
		{"unknown algorithm", token, map[string]string{"X-Signature": "md5=00"}, 401},
		{"signature not hex", token, map[string]string{"X-Signature": "sha256=zz"}, 401},
		{"signature without algorithm", token, map[string]string{"X-Signature": strings.TrimPrefix(docSig, "sha256=")}, 401},
		{"wrong bearer", token, map[string]string{"Authorization": "Bearer nope"}, 401},
		{"basic auth", token, map[string]string{"Authorization": "Basic " + token}, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, []byte(tt.token))
			status, body := post(t, e.url, []byte(docBody), tt.header)
			if status != tt.want {
				t.Fatalf("status %d (%v), want %d", status, body, tt.want)
			}
			stored := len(enginetest.List(t, e.engine, "", 10))
			if (tt.want == 202) != (stored == 1) {
				t.Fatalf("status %d but %d rollouts stored", status, stored)
			}
		})
	}
}

// TestSignaturesOneAfterAnother: the HMAC states the handler reuses start
// from the key every time, whatever the request before wrote into them: a
// valid signature after a wrong one, or after another body, from several
// senders at once.
func TestSignaturesOneAfterAnother(t *testing.T) {
	const token = "my-secret-token"
	e := newEnv(t, []byte(token))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				body := strings.Replace(docBody, "731f7eaddfb6af01cb2173e18f0f75b0ba780ef1", fmt.Sprintf("%040x", g*100+i), 1)
				if status, _ := post(t, e.url, []byte(body), signed("other", body)); status != 401 {
					t.Errorf("wrong token: status %d, want 401", status)
				}
				if status, out := post(t, e.url, []byte(body), signed(token, body)); status != 202 {
					t.Errorf("request %d of sender %d: status %d %v, want 202", i, g, status, out)
				}
			}
		})
	}
	wg.Wait()
	if n := len(enginetest.List(t, e.engine, "", 100)); n != 40 {
		t.Fatalf("%d rollouts stored, want 40", n)
	}
}

func TestInsecureNoAuth(t *testing.T) {
	e := newEnv(t, nil)
	if status, body := post(t, e.url, []byte(docBody), nil); status != 202 {
		t.Fatalf("status %d %v", status, body)
	}
}

// TestBadInput: every bad request gets a clear 4xx naming the problem and
// changes nothing.
func TestBadInput(t *testing.T) {
	const token = "t"
	rev := `"metadata":{"revision":"main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"}`
	obj := `"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps"},"timestamp":"2026-08-07T10:15:30Z","reason":"Progressing","severity":"info"`
	huge := `{` + obj + `,` + rev + `,"message":"` + strings.Repeat("x", webhook.MaxBody) + `"}`
	tests := []struct {
		name, body, contentType string
		chunked                 bool
		want                    int
		field                   string
	}{
		{name: "text/plain", body: docBody, contentType: "text/plain", want: 415},
		{name: "no content type", body: docBody, contentType: "-", want: 415},
		{name: "over 1 MiB", body: huge, want: 413},
		{name: "over 1 MiB without Content-Length", body: huge, chunked: true, want: 413},
		{name: "not JSON", body: `{"involvedObject":`, want: 400, field: "body"},
		{name: "missing kind", body: `{"involvedObject":{"namespace":"a","name":"b"},"timestamp":"2026-08-07T10:15:30Z",` + rev + `}`, want: 400, field: "involvedObject.kind"},
		{name: "missing namespace", body: `{"involvedObject":{"kind":"Kustomization","name":"b"},"timestamp":"2026-08-07T10:15:30Z",` + rev + `}`, want: 400, field: "involvedObject.namespace"},
		{name: "missing name", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a"},"timestamp":"2026-08-07T10:15:30Z",` + rev + `}`, want: 400, field: "involvedObject.name"},
		{name: "Kustomization without revision", body: `{` + obj + `}`, want: 400, field: "metadata.revision"},
		{name: "malformed revision", body: `{` + obj + `,"metadata":{"revision":"main@sha1:123"}}`, want: 400, field: "metadata.revision"},
		{name: "malformed timestamp", body: `{"involvedObject":{"kind":"Kustomization","namespace":"a","name":"b"},"timestamp":"now",` + rev + `}`, want: 400, field: "timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, []byte(token))
			var r io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				r = io.MultiReader(r) // hides the length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, e.url, r)
			switch tt.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json; charset=utf-8")
			case "-":
			default:
				req.Header.Set("Content-Type", tt.contentType)
			}
			req.Header.Set("X-Signature", signature.Sign([]byte(token), []byte(tt.body)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out map[string]string
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != tt.want || out["field"] != tt.field || out["error"] == "" {
				t.Fatalf("got %d %v, want %d naming %q", resp.StatusCode, out, tt.want, tt.field)
			}
			if n := e.engine.Stats().Observations.Load(); n != 0 || len(enginetest.List(t, e.engine, "", 10)) != 0 {
				t.Fatalf("bad input changed state: %d observations", n)
			}
		})
	}
}

// TestKinds: a HelmRelease's event that no layer's apply explains is
// acknowledged and kept out of every rollout; a source's revision that no
// layer has reported is no rollout until one does.
func TestKinds(t *testing.T) {
	const token = "t"
	e := newEnv(t, []byte(token))
	helm := `{"involvedObject":{"kind":"HelmRelease","namespace":"apps","name":"web"},"severity":"error","timestamp":"2026-08-07T10:15:30Z","reason":"UpgradeFailed","message":"x","metadata":{"revision":"1.2.3"}}`
	if status, _ := post(t, e.url, []byte(helm), signed(token, helm)); status != 202 {
		t.Fatalf("HelmRelease: %d", status)
	}
	if len(enginetest.List(t, e.engine, "", 10)) != 0 {
		t.Fatal("a HelmRelease event no layer explains made a rollout")
	}
	now := time.Now().UTC().Format(time.RFC3339)
	const rev = `"revision":"main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1","cluster":"prod"`
	art := `{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"flux-system"},"severity":"info","timestamp":"` + now + `","reason":"NewArtifact","message":"stored artifact for commit 'Add web'","metadata":{` + rev + `}}`
	if status, _ := post(t, e.url, []byte(art), signed(token, art)); status != 202 {
		t.Fatalf("GitRepository: %d", status)
	}
	q := engine.Query{Cluster: "prod", Hash: "731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"}
	if v, err := e.engine.Lookup(q); err == nil {
		t.Fatalf("a revision no layer reported is a rollout: %+v", v)
	}
	layer := `{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps"},"severity":"info","timestamp":"` + now + `","reason":"DependencyNotReady","message":"Dependencies do not meet ready condition","metadata":{` + rev + `}}`
	if status, _ := post(t, e.url, []byte(layer), signed(token, layer)); status != 202 {
		t.Fatalf("Kustomization: %d", status)
	}
	v, err := e.engine.Lookup(q)
	if err != nil || v.Subject != "Add web" || v.Verdict != rollout.VerdictApplying {
		t.Fatalf("source evidence: %+v, %v", v, err)
	}
}

// TestStoreFailureIs503: when the commit fails, nothing is acknowledged and
// notification-controller is told to retry.
func TestStoreFailureIs503(t *testing.T) {
	e := newEnv(t, []byte("my-secret-token"))
	e.db.Close()
	status, body := post(t, e.url, []byte(docBody), map[string]string{"X-Signature": docSig})
	if status != http.StatusServiceUnavailable || body["error"] == "" {
		t.Fatalf("status %d %v, want 503", status, body)
	}
	if e.engine.Stats().Observations.Load() != 0 {
		t.Fatal("a failed commit was counted as stored")
	}
}

// refusing answers every observation with one error, as the engine does
// when the model refuses it or the store fails; the model's own check
// cannot be reached through Decode, which checks the same first.
type refusing struct{ err error }

func (r refusing) Submit(context.Context, rollout.Observation) error { return r.err }

// TestSubmitErrors: an observation the model refuses is a 400 (a retry
// cannot pass), a store failure a 503 (notification-controller retries).
func TestSubmitErrors(t *testing.T) {
	const token = "my-secret-token"
	for _, tt := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("%w: no time", rollout.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("%w: no space left on device", engine.ErrStore), http.StatusServiceUnavailable},
	} {
		srv := httptest.NewServer(webhook.New([]byte(token), refusing{tt.err}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry()))
		status, out := post(t, srv.URL, []byte(docBody), map[string]string{"X-Signature": docSig})
		srv.Close()
		if status != tt.want || out["error"] == "" {
			t.Errorf("%v: status %d %v, want %d with an error", tt.err, status, out, tt.want)
		}
	}
}
