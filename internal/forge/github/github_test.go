package github_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

const (
	token = "ghs_contract-test-token"
	repo  = "acme/fleet"
	sha   = "0123456789abcdef0123456789abcdef01234567"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// clock is the dispatcher's and the contract server's time, moved by the
// test alone.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// rig is a dispatcher on a real store, delivering to the contract server
// through go-github; views are the rollouts' as the test sets them.
type rig struct {
	t      *testing.T
	clock  *clock
	db     *store.DB
	server *forgetest.GitHub
	forge  *github.Forge
	mu     sync.Mutex
	views  map[rollout.Key]*rollout.View
	d      *forge.Dispatcher
}

func newRig(t *testing.T) *rig {
	t.Helper()
	c := &clock{t: t0}
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := &rig{t: t, clock: c, db: db, views: map[rollout.Key]*rollout.View{}}
	r.server = forgetest.StartGitHub(t, token, c.now, repo)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r.forge, err = github.New(github.Options{APIURL: r.server.URL, TokenFile: tokenFile, Now: c.now, EnvironmentURL: "https://fleet.example.com"}); err != nil {
		t.Fatal(err)
	}
	r.restart()
	return r
}

// restart makes a new dispatcher on the same store: what a restarted
// service does.
func (r *rig) restart() {
	r.d = forge.NewDispatcher(r.db, r.forge, r.view, forge.Config{
		Repo:       func(*rollout.View) (forge.Repo, bool) { return forge.Repo{Owner: "acme", Name: "fleet"}, true },
		LogURL:     func(k rollout.Key) string { return "https://fdn.example.com/rollouts/" + k.Cluster + "/" + k.Hash },
		AlertAfter: 5 * time.Minute,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), r.clock.now, nil)
}

func (r *rig) view(k rollout.Key) (*rollout.View, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.views[k]
	if v == nil {
		return nil, errors.New("no such rollout")
	}
	return v, nil
}

// decide sets the rollout's view and publishes its verdict, as the engine
// does in the transaction of the change.
func (r *rig) decide(cluster, hash string, v rollout.Verdict, summary string) {
	r.t.Helper()
	k := rollout.Key{Cluster: cluster, Hash: hash}
	r.mu.Lock()
	r.views[k] = &rollout.View{Cluster: cluster, Hash: hash, Revision: "main@sha1:" + hash, Verdict: v, Summary: summary}
	r.mu.Unlock()
	if err := r.db.Commit(&rollout.Batch{Published: []rollout.Published{{Key: k, Verdict: v, At: r.clock.now()}}, At: r.clock.now()}); err != nil {
		r.t.Fatal(err)
	}
}

func states(d forgetest.Deployment) []string {
	var out []string
	for _, s := range d.Statuses {
		out = append(out, s.State)
	}
	return out
}

func pending(t *testing.T, db *store.DB) []rollout.Publication {
	t.Helper()
	ps, err := db.Publications()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestDeploymentFollowsTheVerdict(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.decide("prod", sha, rollout.VerdictApplying, "2 of 3 layers applied")
	if next := r.d.Flush(ctx); !next.IsZero() {
		t.Fatalf("Flush: next retry %v, want none", next)
	}
	r.clock.add(time.Minute)
	r.decide("prod", sha, rollout.VerdictApplied, "3 layers applied")
	r.d.Flush(ctx)

	deps := r.server.Deployments(repo)
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want 1: %+v", len(deps), deps)
	}
	d := deps[0]
	if d.SHA != sha || d.Environment != "prod" || d.Task != "deploy" {
		t.Errorf("deployment %+v: want sha %s, environment prod, task deploy", d, sha)
	}
	if d.AutoMerge == nil || *d.AutoMerge || d.RequiredContexts == nil || len(*d.RequiredContexts) != 0 {
		t.Errorf("deployment made with auto_merge %v, required_contexts %v: want false and []", d.AutoMerge, d.RequiredContexts)
	}
	marker, _ := d.Payload.(map[string]any)[github.Marker].(map[string]any)
	if marker["cluster"] != "prod" || marker["revision"] != "main@sha1:"+sha {
		t.Errorf("payload %v: want the rollout's marker", d.Payload)
	}
	if got := states(d); !slices.Equal(got, []string{"in_progress", "success"}) {
		t.Errorf("statuses %v, want [in_progress success]", got)
	}
	last := d.Statuses[len(d.Statuses)-1]
	if last.LogURL != "https://fdn.example.com/rollouts/prod/"+sha || last.EnvironmentURL != "https://fleet.example.com" ||
		last.Description != "applied: 3 layers applied" {
		t.Errorf("last status %+v", last)
	}
	if ps := pending(t, r.db); len(ps) != 0 {
		t.Errorf("still due after delivery: %+v", ps)
	}
	p, ok, err := r.db.Publication(rollout.Key{Cluster: "prod", Hash: sha})
	if err != nil || !ok || p.Sent != rollout.VerdictApplied || p.Ref == "" {
		t.Errorf("outbox record %+v %v %v: want applied sent, with the deployment's id", p, ok, err)
	}

	// A second cluster is a second environment: its own deployment.
	r.decide("staging", sha, rollout.VerdictFailed, "apps: HealthCheckFailed")
	r.d.Flush(ctx)
	if deps := r.server.Deployments(repo); len(deps) != 2 || deps[1].Environment != "staging" || !slices.Equal(states(deps[1]), []string{"failure"}) {
		t.Fatalf("deployments %+v: want a second one, staging, failure", deps)
	}
}

// Verdicts decided before a delivery go as the latest one alone; a rollout
// superseded after its success shows inactive.
func TestLaterVerdictReplacesOneNotSent(t *testing.T) {
	r := newRig(t)
	r.decide("prod", sha, rollout.VerdictApplying, "")
	r.decide("prod", sha, rollout.VerdictApplied, "")
	r.d.Flush(context.Background())
	r.decide("prod", sha, rollout.VerdictSuperseded, "replaced by 89abcde")
	r.d.Flush(context.Background())
	deps := r.server.Deployments(repo)
	if len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success", "inactive"}) {
		t.Fatalf("deployments %+v: want one, success then inactive", deps)
	}
}

// A crash after the deployment was made and before its id was recorded:
// the next delivery finds it by its marker instead of making another.
func TestDeploymentFoundAgainAfterCrash(t *testing.T) {
	r := newRig(t)
	r.decide("prod", sha, rollout.VerdictApplying, "")
	// Another rollout's deployment of the same commit and environment
	// (another service instance's marker) must not be taken for it.
	other := forge.Update{Repo: forge.Repo{Owner: "acme", Name: "fleet"}, Environment: "prod", Commit: sha, Cluster: "prod", Revision: "other@sha1:" + sha}
	if _, err := r.forge.Ensure(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	u := forge.Update{Repo: other.Repo, Environment: "prod", Commit: sha, Cluster: "prod", Revision: "main@sha1:" + sha}
	made, err := r.forge.Ensure(context.Background(), u) // made, then the process died
	if err != nil {
		t.Fatal(err)
	}
	r.restart()
	r.d.Flush(context.Background())
	deps := r.server.Deployments(repo)
	if len(deps) != 2 {
		t.Fatalf("%d deployments, want the 2 made before the crash and no other", len(deps))
	}
	for _, d := range deps {
		want := 0
		if d.Payload.(map[string]any)[github.Marker].(map[string]any)["revision"] == u.Revision {
			want = 1
			if id := d.ID; made != strconv.FormatInt(id, 10) {
				t.Errorf("status posted to deployment %d, want %s", id, made)
			}
		}
		if len(d.Statuses) != want {
			t.Errorf("deployment %d has statuses %v, want %d", d.ID, states(d), want)
		}
	}
}

// 429 and GitHub's secondary limit (403 with Retry-After): no request
// before the time the forge gave, then delivered.
func TestRateLimitsHonoured(t *testing.T) {
	for name, fault := range map[string]forgetest.Fault{
		"429":               {Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"120"}}, Body: `{"message":"API rate limit exceeded"}`},
		"secondary 403":     {Status: http.StatusForbidden, Header: http.Header{"Retry-After": {"120"}}, Body: `{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`},
		"primary exhausted": {Status: http.StatusForbidden, Header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(t0.Add(120*time.Second).Unix(), 10)}}, Body: `{"message":"API rate limit exceeded for installation."}`},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.decide("prod", sha, rollout.VerdictApplied, "")
			r.decide("staging", sha, rollout.VerdictApplied, "")
			r.server.Inject(fault)
			next := r.d.Flush(context.Background())
			if want := t0.Add(120 * time.Second); !next.Equal(want) {
				t.Fatalf("next attempt %v, want %v (the forge's limit)", next, want)
			}
			if n := len(r.server.Requests()); n != 1 {
				t.Fatalf("%d requests during the limit, want the 1 refused", n)
			}
			r.clock.add(119 * time.Second)
			r.d.Flush(context.Background())
			if n := len(r.server.Requests()); n != 1 {
				t.Fatalf("%d requests before the limit's end, want 1", n)
			}
			r.clock.add(time.Second)
			if next := r.d.Flush(context.Background()); !next.IsZero() {
				t.Fatalf("next %v after the limit: want all delivered", next)
			}
			for _, req := range r.server.Requests()[1:] {
				if req.At.Before(t0.Add(120 * time.Second)) {
					t.Errorf("request %s %s at %v, before the limit's end", req.Method, req.Path, req.At)
				}
			}
			if deps := r.server.Deployments(repo); len(deps) != 2 {
				t.Fatalf("%d deployments, want 2", len(deps))
			}
		})
	}
}

// Ten minutes without the forge: retried with backoff, nothing lost, the
// verdicts in order once it is back; Warning says so meanwhile.
func TestForgeDownTenMinutes(t *testing.T) {
	r := newRig(t)
	r.server.SetDown(true)
	r.decide("prod", sha, rollout.VerdictApplying, "")
	var tries int
	for r.clock.now().Before(t0.Add(10 * time.Minute)) {
		next := r.d.Flush(context.Background())
		if next.IsZero() || !next.After(r.clock.now()) {
			t.Fatalf("next attempt %v at %v: want a later retry", next, r.clock.now())
		}
		tries++
		r.clock.add(next.Sub(r.clock.now()))
		if r.clock.now().After(t0.Add(5 * time.Minute)) {
			r.decide("prod", sha, rollout.VerdictApplied, "") // decided while the forge is down
		}
	}
	if tries < 3 || tries > 10 {
		t.Errorf("%d attempts in ten minutes: want backoff (15 s doubling)", tries)
	}
	if w := r.d.Warning(); !strings.Contains(w, "github") || !strings.Contains(w, "undelivered since") {
		t.Errorf("Warning %q: want it to say verdicts wait", w)
	}
	r.server.SetDown(false)
	if next := r.d.Flush(context.Background()); !next.IsZero() {
		t.Fatalf("next %v: want delivered", next)
	}
	deps := r.server.Deployments(repo)
	if len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success"}) {
		t.Fatalf("deployments %+v: want one, success", deps)
	}
	if w := r.d.Warning(); w != "" {
		t.Errorf("Warning %q once delivered", w)
	}
}

// A permanent refusal is dead-lettered with the forge's message; the next
// verdict is tried again.
func TestPermanentRefusalDeadLettered(t *testing.T) {
	r := newRig(t)
	r.server.Inject(forgetest.Fault{Status: http.StatusNotFound, Body: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`})
	r.decide("prod", sha, rollout.VerdictApplying, "")
	if next := r.d.Flush(context.Background()); !next.IsZero() {
		t.Fatalf("next %v: a 404 is not retried", next)
	}
	p, _, _ := r.db.Publication(rollout.Key{Cluster: "prod", Hash: sha})
	if !p.Dead || !strings.Contains(p.LastError, "404") || !strings.Contains(p.LastError, "Not Found") {
		t.Fatalf("record %+v: want dead-lettered with the forge's message", p)
	}
	if ps := pending(t, r.db); len(ps) != 0 {
		t.Fatalf("dead letter still due: %+v", ps)
	}
	r.decide("prod", sha, rollout.VerdictApplied, "")
	r.d.Flush(context.Background())
	if deps := r.server.Deployments(repo); len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success"}) {
		t.Fatalf("deployments %+v: want the next verdict delivered", deps)
	}
}

// Flux's text reaches the forge as one clean line of at most 140
// characters (the contract server refuses longer ones, as GitHub does).
func TestHostileDescription(t *testing.T) {
	r := newRig(t)
	hostile := "apps: HealthCheckFailed\x1b[31m\r\nDeployment/apps/web\tstatus: 'Failed' <script>alert(1)</script> " +
		strings.Repeat("é très long message ", 20) + "\x00"
	r.decide("prod", sha, rollout.VerdictFailed, hostile)
	if next := r.d.Flush(context.Background()); !next.IsZero() {
		t.Fatalf("next %v: want delivered", next)
	}
	deps := r.server.Deployments(repo)
	if len(deps) != 1 || len(deps[0].Statuses) != 1 {
		t.Fatalf("deployments %+v", deps)
	}
	desc := deps[0].Statuses[0].Description
	if n := utf8.RuneCountInString(desc); n > 140 || !strings.HasSuffix(desc, "…") {
		t.Errorf("description of %d characters %q: want at most 140, cut with …", n, desc)
	}
	if strings.ContainsAny(desc, "\x1b\r\n\t\x00") || !strings.HasPrefix(desc, "failed: apps: HealthCheckFailed [31m Deployment/apps/web status:") {
		t.Errorf("description %q: want one line without control characters", desc)
	}
}

// A rollout whose revision names no commit, or without a repository, is
// not shown, and not retried.
func TestNoCommitNotShown(t *testing.T) {
	r := newRig(t)
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("9", 64)}
	r.views[k] = &rollout.View{Cluster: "prod", Hash: k.Hash, Revision: "latest@sha256:" + k.Hash, Source: "OCIRepository/flux-system/apps", Verdict: rollout.VerdictApplied}
	if err := r.db.Commit(&rollout.Batch{Published: []rollout.Published{{Key: k, Verdict: rollout.VerdictApplied, At: t0}}}); err != nil {
		t.Fatal(err)
	}
	if next := r.d.Flush(context.Background()); !next.IsZero() || len(r.server.Requests()) != 0 {
		t.Fatalf("next %v, %d requests: want none", next, len(r.server.Requests()))
	}
	if p, _, _ := r.db.Publication(k); p.Due() || !strings.Contains(p.LastError, "no git commit") {
		t.Fatalf("record %+v: want done, saying why", p)
	}
}
