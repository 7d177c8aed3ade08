package github_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

const (
	token = "ghs_contract-test-token"
	repo  = "acme/fleet"
	sha   = "0123456789abcdef0123456789abcdef01234567"
)

var t0 = forgetest.T0

// rig is the shared forge rig with GitHub's contract server behind
// go-github.
type rig struct {
	*forgetest.Rig
	server *forgetest.GitHub
	forge  *github.Forge
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{Rig: forgetest.NewRig(t, forge.Repo{Owner: "acme", Name: "fleet"})}
	r.server = forgetest.StartGitHub(t, token, r.Clock.Now, repo)
	var err error
	if r.forge, err = github.New(github.Options{APIURL: r.server.URL, TokenFile: forgetest.TokenFile(t, token), Now: r.Clock.Now,
		EnvironmentURL: "https://fleet.example.com", CommitStatus: true}); err != nil {
		t.Fatal(err)
	}
	r.Restart(r.forge)
	return r
}

func states(d forgetest.Deployment) []string {
	var out []string
	for _, s := range d.Statuses {
		out = append(out, s.State)
	}
	return out
}

func TestDeploymentFollowsTheVerdict(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.Decide("prod", sha, rollout.VerdictApplying, "2 of 3 layers applied")
	if next := r.D.Flush(ctx); !next.IsZero() {
		t.Fatalf("Flush: next retry %v, want none", next)
	}
	r.Clock.Add(time.Minute)
	r.Decide("prod", sha, rollout.VerdictApplied, "3 layers applied")
	r.D.Flush(ctx)

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
	// And the commit's status of the cluster, once a verdict: never one
	// per layer.
	var cs []string
	for _, s := range r.server.CommitStatuses(repo) {
		cs = append(cs, s.Context+" "+s.State+" "+s.Description)
	}
	if want := []string{"flux-deploy/prod pending applying: 2 of 3 layers applied", "flux-deploy/prod success applied: 3 layers applied"}; !slices.Equal(cs, want) {
		t.Errorf("commit statuses %q, want %q", cs, want)
	}
	last := d.Statuses[len(d.Statuses)-1]
	if last.LogURL != "https://fdn.example.com/ui/prod/"+sha || last.EnvironmentURL != "https://fleet.example.com" ||
		last.Description != "applied: 3 layers applied" {
		t.Errorf("last status %+v", last)
	}
	if ps := r.Due(); len(ps) != 0 {
		t.Errorf("still due after delivery: %+v", ps)
	}
	p, ok, err := r.DB.Channel("forge").Publication(rollout.Key{Cluster: "prod", Hash: sha})
	if err != nil || !ok || p.Sent != rollout.VerdictApplied || p.Ref == "" {
		t.Errorf("outbox record %+v %v %v: want applied sent, with the deployment's id", p, ok, err)
	}

	// A second cluster is a second environment: its own deployment,
	// under the name --forge-environments gives it.
	r.Environments = map[string]string{"staging": "pre-production"}
	r.Restart(r.forge)
	r.Decide("staging", sha, rollout.VerdictFailed, "apps: HealthCheckFailed")
	r.D.Flush(ctx)
	if deps := r.server.Deployments(repo); len(deps) != 2 || deps[1].Environment != "pre-production" || !slices.Equal(states(deps[1]), []string{"failure"}) {
		t.Fatalf("deployments %+v: want a second one, pre-production, failure", deps)
	}
}

// Verdicts decided before a delivery go as the latest one alone; a rollout
// superseded after its success shows inactive.
func TestLaterVerdictReplacesOneNotSent(t *testing.T) {
	r := newRig(t)
	r.Decide("prod", sha, rollout.VerdictApplying, "")
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	r.D.Flush(context.Background())
	r.Decide("prod", sha, rollout.VerdictSuperseded, "replaced by 89abcde")
	r.D.Flush(context.Background())
	deps := r.server.Deployments(repo)
	if len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success", "inactive"}) {
		t.Fatalf("deployments %+v: want one, success then inactive", deps)
	}
}

// A crash after the deployment was made and before its id was recorded:
// the next delivery finds it by its marker instead of making another.
func TestDeploymentFoundAgainAfterCrash(t *testing.T) {
	r := newRig(t)
	r.Decide("prod", sha, rollout.VerdictApplying, "")
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
	r.Restart(r.forge)
	r.D.Flush(context.Background())
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
			r.Decide("prod", sha, rollout.VerdictApplied, "")
			r.Decide("staging", sha, rollout.VerdictApplied, "")
			// The answer takes 3 s to arrive: a Retry-After counts from
			// then (a reset is a time of its own).
			fault.Taking = func() { r.Clock.Add(3 * time.Second) }
			r.server.Inject(fault)
			next := r.D.Flush(context.Background())
			want := t0.Add(123 * time.Second)
			if name == "primary exhausted" {
				want = t0.Add(120 * time.Second)
			}
			if !next.Equal(want) {
				t.Fatalf("next attempt %v, want %v (the forge's limit)", next, want)
			}
			if n := len(r.server.Requests()); n != 1 {
				t.Fatalf("%d requests during the limit, want the 1 refused", n)
			}
			r.Clock.Add(want.Sub(r.Clock.Now()) - time.Second)
			r.D.Flush(context.Background())
			if n := len(r.server.Requests()); n != 1 {
				t.Fatalf("%d requests before the limit's end, want 1", n)
			}
			r.Clock.Add(time.Second)
			if next := r.D.Flush(context.Background()); !next.IsZero() {
				t.Fatalf("next %v after the limit: want all delivered", next)
			}
			for _, req := range r.server.Requests()[1:] {
				if req.At.Before(want) {
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
	r.Decide("prod", sha, rollout.VerdictApplying, "")
	var tries int
	for r.Clock.Now().Before(t0.Add(10 * time.Minute)) {
		next := r.D.Flush(context.Background())
		if next.IsZero() || !next.After(r.Clock.Now()) {
			t.Fatalf("next attempt %v at %v: want a later retry", next, r.Clock.Now())
		}
		tries++
		r.Clock.Add(next.Sub(r.Clock.Now()))
		if r.Clock.Now().After(t0.Add(5 * time.Minute)) {
			r.Decide("prod", sha, rollout.VerdictApplied, "") // decided while the forge is down
		}
	}
	if tries < 3 || tries > 10 {
		t.Errorf("%d attempts in ten minutes: want backoff (15 s doubling)", tries)
	}
	if w := r.D.Warning(); !strings.Contains(w, "github") || !strings.Contains(w, "undelivered since") {
		t.Errorf("Warning %q: want it to say verdicts wait", w)
	}
	r.server.SetDown(false)
	if next := r.D.Flush(context.Background()); !next.IsZero() {
		t.Fatalf("next %v: want delivered", next)
	}
	deps := r.server.Deployments(repo)
	if len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success"}) {
		t.Fatalf("deployments %+v: want one, success", deps)
	}
	if w := r.D.Warning(); w != "" {
		t.Errorf("Warning %q once delivered", w)
	}
}

// A permanent refusal is dead-lettered with the forge's message; the next
// verdict is tried again.
func TestPermanentRefusalDeadLettered(t *testing.T) {
	r := newRig(t)
	r.server.Inject(forgetest.Fault{Status: http.StatusNotFound, Body: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`})
	r.Decide("prod", sha, rollout.VerdictApplying, "")
	if next := r.D.Flush(context.Background()); !next.IsZero() {
		t.Fatalf("next %v: a 404 is not retried", next)
	}
	p, _, _ := r.DB.Channel("forge").Publication(rollout.Key{Cluster: "prod", Hash: sha})
	if !p.Dead || !strings.Contains(p.LastError, "404") || !strings.Contains(p.LastError, "Not Found") {
		t.Fatalf("record %+v: want dead-lettered with the forge's message", p)
	}
	if ps := r.Due(); len(ps) != 0 {
		t.Fatalf("dead letter still due: %+v", ps)
	}
	if w := r.D.Warning(); !strings.Contains(w, "refused for good") || !strings.Contains(w, "404") {
		t.Errorf("Warning %q: want it to say the forge refuses", w)
	}
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	r.D.Flush(context.Background())
	if deps := r.server.Deployments(repo); len(deps) != 1 || !slices.Equal(states(deps[0]), []string{"success"}) {
		t.Fatalf("deployments %+v: want the next verdict delivered", deps)
	}
	if w := r.D.Warning(); w != "" {
		t.Errorf("Warning %q once a verdict is delivered again", w)
	}
}

// Flux's text reaches the forge as one clean line of at most 140
// characters (the contract server refuses longer ones, as GitHub does).
func TestHostileDescription(t *testing.T) {
	r := newRig(t)
	hostile := "apps: HealthCheckFailed\x1b[31m\r\nDeployment/apps/web\tstatus: 'Failed' <script>alert(1)</script> " +
		strings.Repeat("é très long message ", 20) + "\x00"
	r.Decide("prod", sha, rollout.VerdictFailed, hostile)
	if next := r.D.Flush(context.Background()); !next.IsZero() {
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
	r.PublishView(&rollout.View{Cluster: "prod", Hash: k.Hash, Revision: "latest@sha256:" + k.Hash, Source: rollout.Ref{Kind: "OCIRepository", Namespace: "flux-system", Name: "apps"}, Verdict: rollout.VerdictApplied})
	if next := r.D.Flush(context.Background()); !next.IsZero() || len(r.server.Requests()) != 0 {
		t.Fatalf("next %v, %d requests: want none", next, len(r.server.Requests()))
	}
	if p, _, _ := r.DB.Channel("forge").Publication(k); p.Due() || !strings.Contains(p.LastError, "no git commit") {
		t.Fatalf("record %+v: want done, saying why", p)
	}
}

// writeKey writes a new RSA key as GitHub gives an App's (PKCS#1 PEM).
func writeKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, path
}

// As a GitHub App: the JWT signed with its key gets an installation token,
// used until five minutes before it expires (an hour), then made anew;
// a key GitHub does not know is refused for good.
func TestGitHubAppInstallationToken(t *testing.T) {
	r := newRig(t)
	key, keyFile := writeKey(t)
	r.server.AddApp(42, 7, &key.PublicKey)
	f, err := github.New(github.Options{APIURL: r.server.URL, Now: r.Clock.Now, App: &github.App{ID: 42, InstallationID: 7, PrivateKeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	r.Restart(f)
	deliver := func(cluster string, v rollout.Verdict) {
		t.Helper()
		r.Decide(cluster, sha, v, "")
		r.FlushAll()
	}
	deliver("prod", rollout.VerdictApplying)
	r.Clock.Add(54 * time.Minute)
	deliver("prod", rollout.VerdictApplied)
	if n := r.server.Installations(); n != 1 {
		t.Fatalf("%d installation tokens within the first one's hour, want 1", n)
	}
	r.Clock.Add(2 * time.Minute) // within five minutes of its expiry
	deliver("staging", rollout.VerdictApplied)
	if n := r.server.Installations(); n != 2 {
		t.Fatalf("%d installation tokens, want a second one before the first expired", n)
	}
	for _, req := range r.server.Requests() {
		if req.Answered != http.StatusCreated && req.Answered != http.StatusOK {
			t.Errorf("%s %s answered %d", req.Method, req.Path, req.Answered)
		}
	}

	_, otherFile := writeKey(t)
	bad, err := github.New(github.Options{APIURL: r.server.URL, Now: r.Clock.Now, App: &github.App{ID: 42, InstallationID: 7, PrivateKeyFile: otherFile}})
	if err != nil {
		t.Fatal(err)
	}
	r.Restart(bad)
	r.Decide("dev", sha, rollout.VerdictApplied, "")
	r.D.Flush(context.Background())
	if p := r.Record("dev", sha); !p.Dead || !strings.Contains(p.LastError, "401") || !strings.Contains(p.LastError, "JSON web token") {
		t.Fatalf("a key GitHub does not know: %+v, want dead-lettered with GitHub's message", p)
	}
}

// Commits merged between the source's previously applied commit and the
// one applied (a merge queue's) get the cluster's commit status of the one
// they went out in: success when it applied, failure when it failed.
func TestCommitsInsideALaterOne(t *testing.T) {
	r := newRig(t)
	var c []string
	for i := range 6 {
		c = append(c, fmt.Sprintf("%040x", 0xc0+i))
	}
	r.server.AddCommits(repo, c...)
	deliver := func(commit string, v rollout.Verdict, summary string) {
		t.Helper()
		r.Decide("prod", commit, v, summary)
		r.FlushAll()
	}
	deliver(c[0], rollout.VerdictApplied, "all 3 expected layers applied it") // the first: no history before it
	deliver(c[3], rollout.VerdictApplied, "all 3 expected layers applied it")
	deliver(c[5], rollout.VerdictFailed, "flux-system/apps failed: HealthCheckFailed")
	got := map[string][]string{}
	for _, s := range r.server.CommitStatuses(repo) {
		got[s.SHA] = append(got[s.SHA], s.State+": "+s.Description)
	}
	inside := func(of, state, desc string) []string {
		return []string{state + ": went out in " + of[:7] + ", " + desc}
	}
	want := map[string][]string{
		c[0]: {"success: applied: all 3 expected layers applied it"},
		c[1]: inside(c[3], "success", "applied: all 3 expected layers applied it"),
		c[2]: inside(c[3], "success", "applied: all 3 expected layers applied it"),
		c[3]: {"success: applied: all 3 expected layers applied it"},
		c[4]: inside(c[5], "failure", "failed: flux-system/apps failed: HealthCheckFailed"),
		c[5]: {"failure: failed: flux-system/apps failed: HealthCheckFailed"},
	}
	for _, x := range c {
		if !slices.Equal(got[x], want[x]) {
			t.Errorf("commit %s: statuses %q, want %q", x[len(x)-2:], got[x], want[x])
		}
	}
}

// A storm of 429s: each one's Retry-After is waited out in full, with no
// request to GitHub before it ends, and nothing is lost.
func TestRateLimitStorm(t *testing.T) {
	r := newRig(t)
	for range 5 {
		r.server.Inject(forgetest.Fault{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"30"}}, Body: `{"message":"API rate limit exceeded"}`})
	}
	for i := range 4 {
		r.Decide(fmt.Sprintf("cluster-%d", i), sha, rollout.VerdictApplied, "")
	}
	for range 20 {
		next := r.D.Flush(context.Background())
		if next.IsZero() {
			break
		}
		r.Clock.Add(next.Sub(r.Clock.Now()))
	}
	reqs := r.server.Requests()
	refused := 0
	for _, q := range reqs {
		if q.Answered != http.StatusTooManyRequests {
			continue
		}
		refused++
		for _, o := range reqs {
			if o.At.After(q.At) && o.At.Before(q.At.Add(30*time.Second)) {
				t.Errorf("%s %s at %v, before the end of the limit GitHub gave at %v", o.Method, o.Path, o.At, q.At)
			}
		}
	}
	if refused != 5 {
		t.Fatalf("%d refusals, want the 5 injected", refused)
	}
	deps := r.server.Deployments(repo)
	if len(deps) != 4 {
		t.Fatalf("%d deployments after the storm, want 4", len(deps))
	}
	for _, d := range deps {
		if !slices.Equal(states(d), []string{"success"}) {
			t.Errorf("deployment in %s: %v", d.Environment, states(d))
		}
	}
}

// A verdict an older binary left undelivered, without what is shown of it,
// whose rollout was gone when this one started (nothing to fill it from):
// not shown, and not retried.
func TestCollectedRolloutNotShown(t *testing.T) {
	r := newRig(t)
	k := rollout.Key{Cluster: "prod", Hash: sha}
	r.PublishBare(k, rollout.VerdictApplied)
	if next := r.D.Flush(context.Background()); !next.IsZero() || len(r.server.Requests()) != 0 {
		t.Fatalf("next %v, %d requests: want none", next, len(r.server.Requests()))
	}
	if p := r.Record("prod", sha); p.Due() || !strings.Contains(p.LastError, "no longer known") {
		t.Fatalf("record %+v: want done, saying why", p)
	}
}

// The source's previously applied commit gone from the repository (a
// force-push): the compare API refuses it, the commits inside are not
// shown, and the verdict itself is delivered, not dead-lettered.
func TestInsideBaseGone(t *testing.T) {
	r := newRig(t)
	gone, c1 := fmt.Sprintf("%040x", 0xdead), fmt.Sprintf("%040x", 0xc1)
	r.Decide("prod", gone, rollout.VerdictApplied, "") // any 40-hex commit exists until AddCommits
	r.FlushAll()
	r.server.AddCommits(repo, c1) // the history now knows c1 alone
	r.Decide("prod", c1, rollout.VerdictApplied, "")
	r.FlushAll()
	if p := r.Record("prod", c1); p.Dead || p.Sent != rollout.VerdictApplied {
		t.Fatalf("record %+v: want delivered", p)
	}
}
