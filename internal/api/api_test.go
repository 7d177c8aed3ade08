package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/server"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

var hashOf = enginetest.Hash

type env struct {
	url    string
	engine *engine.Engine
	run    func()
}

// newEnv serves the API over loopback; the engine runs once run is called,
// so readiness can be observed before it.
func newEnv(t *testing.T) *env {
	t.Helper()
	te := enginetest.Start(t, t.TempDir(), rollout.Config{StuckAfter: time.Hour}, time.Now, false)
	srv := httptest.NewServer(routes(te.Engine))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, engine: te.Engine, run: te.Run}
}

// routes is the service's router on engine, with the webhook's token "t".
func routes(engine *engine.Engine) http.Handler {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	return server.Routes(server.Parts{Webhook: webhook.New([]byte("t"), engine, log, reg), API: api.New(engine, log, api.Options{}),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})})
}

func (e *env) observe(t *testing.T, layer, label string, sig rollout.Signal, cluster string) {
	t.Helper()
	e.observeAt(t, layer, label, sig, cluster, time.Now())
}

func (e *env) observeAt(t *testing.T, layer, label string, sig rollout.Signal, cluster string, at time.Time) {
	t.Helper()
	err := e.engine.Submit(context.Background(), rollout.Observation{
		Cluster:  cluster,
		Emitter:  rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: layer},
		Revision: "main@sha1:" + hashOf(label), Hash: hashOf(label),
		At: at.UTC().Truncate(time.Second), Signal: sig, Reason: "ReconciliationSucceeded",
	})
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func TestVerdictEndpoint(t *testing.T) {
	e := newEnv(t)
	e.run()
	e.observe(t, "apps", "A", rollout.SignalSucceeded, "")
	e.observe(t, "apps", "B", rollout.SignalProgressing, "")
	e.observe(t, "apps", "B", rollout.SignalProgressing, "staging")

	tests := []struct {
		name  string
		query string
		want  int
		check func(t *testing.T, body map[string]any)
	}{
		{"full revision", "rev=main@sha1:" + hashOf("A"), 200, func(t *testing.T, b map[string]any) {
			if b["verdict"] != "applied" || b["terminal"] != true || b["hash"] != hashOf("A") || b["completed_at"] == nil {
				t.Fatalf("%v", b)
			}
			for _, k := range []string{"revision", "first_seen", "superseded_by", "layers", "failures"} {
				if _, ok := b[k]; !ok {
					t.Fatalf("response lacks %q", k)
				}
			}
			l := b["layers"].([]any)[0].(map[string]any)
			for _, k := range []string{"name", "state", "revision", "reason", "message", "at"} {
				if _, ok := l[k]; !ok {
					t.Fatalf("layer lacks %q: %v", k, l)
				}
			}
		}},
		{"hash", "rev=" + hashOf("A"), 200, nil},
		{"upper-case hash", "rev=" + strings.ToUpper(hashOf("A")), 200, nil},
		{"prefix", "rev=" + hashOf("A")[:7], 200, nil},
		{"an applied revision names no successor", "rev=" + hashOf("A")[:10], 200, func(t *testing.T, b map[string]any) {
			if b["superseded_by"] != nil {
				t.Fatalf("applied A names a successor: %v", b["superseded_by"])
			}
		}},
		{"on one cluster", "rev=" + hashOf("B") + "&cluster=staging", 200, func(t *testing.T, b map[string]any) {
			if b["cluster"] != "staging" || b["verdict"] != "applying" || b["terminal"] != false {
				t.Fatalf("%v", b)
			}
		}},
		{"never seen", "rev=" + hashOf("never"), 404, func(t *testing.T, b map[string]any) {
			if b["verdict"] != "unknown" || b["terminal"] != false || b["hash"] != hashOf("never") {
				t.Fatalf("%v", b)
			}
		}},
		{"never seen on that cluster", "rev=" + hashOf("A") + "&cluster=staging", 404, nil},
		{"same hash on two clusters", "rev=" + hashOf("B"), 409, func(t *testing.T, b map[string]any) {
			if len(b["matches"].([]any)) != 2 {
				t.Fatalf("%v", b)
			}
		}},
		{"missing rev", "", 400, nil},
		{"short prefix", "rev=abc12", 400, nil},
		{"not a revision", "rev=main@sha1:xyz", 400, nil},
		{"bad wait", "rev=" + hashOf("A") + "&wait=soon", 400, nil},
		{"negative wait", "rev=" + hashOf("A") + "&wait=-1s", 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(t, e.url+"/verdict?"+tt.query)
			if status != tt.want {
				t.Fatalf("status %d %v, want %d", status, body, tt.want)
			}
			if status == 400 && (body["error"] == "" || body["field"] == nil) {
				t.Fatalf("400 without a field: %v", body)
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func TestVerdictWait(t *testing.T) {
	e := newEnv(t)
	e.run()
	e.observe(t, "apps", "R0", rollout.SignalSucceeded, "")
	e.observe(t, "infra", "R0", rollout.SignalSucceeded, "")

	type result struct {
		status int
		body   map[string]any
	}
	results := make(chan result, 1)
	go func() {
		status, body := get(t, e.url+"/verdict?rev="+hashOf("R1")+"&wait=1m")
		results <- result{status, body}
	}()
	// The long poll waits through "unknown" and "applying" and returns as
	// soon as the rollout is terminal.
	e.observe(t, "infra", "R1", rollout.SignalSucceeded, "")
	select {
	case r := <-results:
		t.Fatalf("returned before the rollout was terminal: %v", r)
	default:
	}
	e.observe(t, "apps", "R1", rollout.SignalSucceeded, "")
	select {
	case r := <-results:
		if r.status != 200 || r.body["verdict"] != "applied" {
			t.Fatalf("wait returned %d %v", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return when the rollout was applied")
	}

	// A wait that runs out answers with the verdict as it stands.
	e.observe(t, "infra", "R2", rollout.SignalSucceeded, "")
	status, body := get(t, e.url+"/verdict?rev="+hashOf("R2")+"&wait=50ms")
	if status != 200 || body["verdict"] != "applying" {
		t.Fatalf("expired wait: %d %v", status, body)
	}
	status, body = get(t, e.url+"/verdict?rev="+hashOf("nothing")+"&wait=50ms")
	if status != 404 || body["verdict"] != "unknown" {
		t.Fatalf("expired wait on unknown: %d %v", status, body)
	}
}

func TestRolloutsHealthMetrics(t *testing.T) {
	e := newEnv(t)
	if status, body := get(t, e.url+"/readyz"); status != 503 || body["ready"] != false {
		t.Fatalf("readyz before the engine runs: %d %v", status, body)
	}
	e.run()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _ := get(t, e.url+"/readyz")
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never turned ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, _ := get(t, e.url+"/healthz"); status != 200 {
		t.Fatalf("healthz %d", status)
	}

	e.observeAt(t, "apps", "old", rollout.SignalSucceeded, "", time.Now().Add(-time.Minute))
	e.observe(t, "apps", "new", rollout.SignalProgressing, "")
	status, body := get(t, e.url+"/rollouts")
	rs := body["rollouts"].([]any)
	if status != 200 || len(rs) != 2 || rs[0].(map[string]any)["hash"] != hashOf("new") {
		t.Fatalf("rollouts not newest first: %v", body)
	}
	if status, _ := get(t, e.url+"/rollouts?limit=0"); status != 400 {
		t.Fatalf("limit=0: %d", status)
	}

	// A rejected event is counted too.
	if resp, err := http.Post(e.url+"/webhook", "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != 415 {
		t.Fatalf("webhook with text/plain: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "fdn_events_received_total") {
		t.Fatalf("metrics %d: %.300s", resp.StatusCode, b)
	}
}

// TestLongPollOutlivesServerTimeouts: a wait longer than the server's read
// and write timeouts is not cut short by them.
func TestLongPollOutlivesServerTimeouts(t *testing.T) {
	e := newEnv(t)
	e.run()
	e.observe(t, "apps", "R1", rollout.SignalProgressing, "")
	srv := httptest.NewUnstartedServer(routes(e.engine))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	defer srv.Close()
	const wait = 700 * time.Millisecond
	start := time.Now()
	status, body := get(t, srv.URL+"/verdict?rev="+hashOf("R1")+"&wait="+wait.String())
	if status != 200 || body["verdict"] != "applying" {
		t.Fatalf("%d %v", status, body)
	}
	if el := time.Since(start); el < wait {
		t.Fatalf("long poll returned after %v, before its wait of %v", el, wait)
	}
}

// TestCommitOnEveryCluster: GET /commits/{rev} gives one commit's verdict
// on each cluster that has it, where /verdict without a cluster answers 409.
func TestCommitOnEveryCluster(t *testing.T) {
	e := newEnv(t)
	e.run()
	e.observe(t, "apps", "C", rollout.SignalSucceeded, "staging")
	e.observe(t, "apps", "C", rollout.SignalProgressing, "prod")
	e.observe(t, "apps", "D", rollout.SignalSucceeded, "prod")
	if code, _ := get(t, e.url+"/verdict?rev="+hashOf("C")); code != http.StatusConflict {
		t.Fatalf("/verdict on two clusters: %d, want 409", code)
	}
	code, body := get(t, e.url+"/commits/"+hashOf("C")[:10])
	if code != http.StatusOK || body["hash"] != hashOf("C")[:10] {
		t.Fatalf("%d %v", code, body)
	}
	clusters := body["clusters"].([]any)
	var got []string
	for _, c := range clusters {
		m := c.(map[string]any)
		got = append(got, m["cluster"].(string)+" "+m["verdict"].(string))
	}
	if strings.Join(got, ", ") != "prod superseded, staging applied" { // D replaced C on prod
		t.Fatalf("clusters %v", got)
	}
	// An OCI rollout on a third cluster whose origin revision is C counts.
	oci := rollout.Observation{Cluster: "edge", Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"},
		Revision: "latest@sha256:" + strings.Repeat("0c", 32), Hash: strings.Repeat("0c", 32),
		Origin: "main@sha1:" + hashOf("C"), OriginHash: hashOf("C"), At: time.Now().UTC().Truncate(time.Second),
		Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded"}
	if err := e.engine.Submit(context.Background(), oci); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, e.url+"/commits/"+hashOf("C")); len(body["clusters"].([]any)) != 3 ||
		body["clusters"].([]any)[0].(map[string]any)["cluster"] != "edge" ||
		body["clusters"].([]any)[0].(map[string]any)["origin_hash"] != hashOf("C") { // the commit, for clients to name it by
		t.Fatalf("with the OCI rollout: %v", body["clusters"])
	}
	// A prefix that names two commits is ambiguous.
	for _, h := range []string{"abcdef1" + strings.Repeat("1", 33), "abcdef1" + strings.Repeat("2", 33)} {
		o := oci
		o.Cluster, o.Revision, o.Hash, o.Origin, o.OriginHash = "prod", "main@sha1:"+h, h, "", ""
		if err := e.engine.Submit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := get(t, e.url+"/commits/abcdef1"); code != http.StatusConflict || len(body["matches"].([]any)) != 2 {
		t.Fatalf("an ambiguous prefix: %d %v", code, body)
	}
	if code, body := get(t, e.url+"/commits/"+hashOf("never")); code != http.StatusNotFound || len(body["clusters"].([]any)) != 0 {
		t.Fatalf("a commit never seen: %d %v", code, body)
	}
	if code, _ := get(t, e.url+"/commits/xyz"); code != http.StatusBadRequest {
		t.Fatalf("a malformed revision: %d", code)
	}
}

// TestRolloutsSinceAndSource: /rollouts filtered by the time a rollout
// began and by its source.
func TestRolloutsSinceAndSource(t *testing.T) {
	e := newEnv(t)
	e.run()
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	e.observeAt(t, "apps", "early", rollout.SignalSucceeded, "", t0)
	e.observeAt(t, "apps", "late", rollout.SignalSucceeded, "", t0.Add(30*time.Minute))
	err := e.engine.Submit(context.Background(), rollout.Observation{
		Emitter:  rollout.Emitter{Role: rollout.RoleSource, Kind: "GitRepository", Namespace: "flux-system", Name: "tenant"},
		Revision: "main@sha1:" + hashOf("other"), Hash: hashOf("other"), At: t0.Add(40 * time.Minute), Signal: rollout.SignalArtifact, Reason: "NewArtifact",
	})
	if err != nil {
		t.Fatal(err)
	}
	// A source's revision is a rollout once a layer reports it.
	e.observeAt(t, "tenant", "other", rollout.SignalProgressing, "", t0.Add(41*time.Minute))
	hashes := func(query string) []string {
		status, body := get(t, e.url+"/rollouts?"+query)
		if status != 200 {
			t.Fatalf("%s: %d %v", query, status, body)
		}
		var out []string
		for _, r := range body["rollouts"].([]any) {
			out = append(out, r.(map[string]any)["hash"].(string))
		}
		return out
	}
	since := url.Values{"since": {t0.Add(10 * time.Minute).Format(time.RFC3339)}}.Encode()
	if got := hashes(since); len(got) != 2 || got[0] != hashOf("other") || got[1] != hashOf("late") {
		t.Fatalf("since: %v", got)
	}
	if got := hashes(since + "&source=GitRepository/flux-system/tenant"); len(got) != 1 || got[0] != hashOf("other") {
		t.Fatalf("since and source: %v", got)
	}
	if status, _ := get(t, e.url+"/rollouts?since=yesterday"); status != 400 {
		t.Fatalf("a malformed since: %d", status)
	}
	// layers=none: the same rollouts, without their layers.
	for query, want := range map[string]int{since: 1, since + "&layers=none": 0, "layers=none": 0, "layers=all": 1} {
		status, body := get(t, e.url+"/rollouts?"+query)
		if status != 200 {
			t.Fatalf("%s: %d", query, status)
		}
		for _, r := range body["rollouts"].([]any) {
			if r := r.(map[string]any); len(r["layers"].([]any)) != want && r["hash"] != hashOf("other") {
				t.Fatalf("%s: layers %v", query, r["layers"])
			}
		}
	}
	if status, _ := get(t, e.url+"/rollouts?layers=some"); status != 400 {
		t.Fatalf("a malformed layers: %d", status)
	}
}

// TestRolloutsPages: a list longer than its limit ends with next, and
// following next (after) reads the rest once each, in order, with or
// without a filter; the last page has none.
func TestRolloutsPages(t *testing.T) {
	e := newEnv(t)
	e.run()
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var want []string // newest first
	for i := range 7 {
		label := fmt.Sprintf("page-%d", i)
		e.observeAt(t, "apps", label, rollout.SignalSucceeded, "", t0.Add(time.Duration(i)*time.Minute))
		want = append([]string{hashOf(label)}, want...)
	}
	walk := func(query string) (got []string, pages int) {
		t.Helper()
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		for {
			status, body := get(t, e.url+"/rollouts?"+q.Encode())
			if status != 200 {
				t.Fatalf("%s: %d %v", q.Encode(), status, body)
			}
			pages++
			for _, r := range body["rollouts"].([]any) {
				got = append(got, r.(map[string]any)["hash"].(string))
			}
			next, _ := body["next"].(string)
			if next == "" {
				return got, pages
			}
			if pages > 10 {
				t.Fatalf("%s: no end after %d pages", query, pages)
			}
			q.Set("after", next)
		}
	}
	if got, pages := walk("limit=3"); !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("limit=3: %d pages of %v, want %v", pages, got, want)
	}
	since := url.Values{"since": {t0.Add(2 * time.Minute).Format(time.RFC3339)}, "limit": {"2"}}.Encode()
	if got, pages := walk(since); !slices.Equal(got, want[:5]) || pages != 3 {
		t.Fatalf("since, limit=2: %d pages of %v, want %v", pages, got, want[:5])
	}
	if got, pages := walk("limit=7"); !slices.Equal(got, want) || pages != 1 {
		t.Fatalf("limit=7: %d pages of %v", pages, got)
	}
	if status, body := get(t, e.url+"/rollouts?after=yesterday"); status != 400 || body["field"] != "after" {
		t.Fatalf("a malformed after: %d %v", status, body)
	}
}
