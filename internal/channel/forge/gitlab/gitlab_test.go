package gitlab_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/gitlab"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

const (
	token   = "glpat-contract-test"
	project = "acme/platform/fleet"
	sha     = "0123456789abcdef0123456789abcdef01234567"
	sha2    = "89abcdef0123456789abcdef0123456789abcdef"
)

type rig struct {
	*forgetest.Rig
	server *forgetest.GitLab
	forge  *gitlab.Forge
}

func newRig(t *testing.T) *rig {
	t.Helper()
	repo, _ := forge.ParseRepo(project)
	r := &rig{Rig: forgetest.NewRig(t, repo)}
	r.server = forgetest.StartGitLab(t, token, r.Clock.Now, project)
	var err error
	if r.forge, err = gitlab.New(gitlab.Options{URL: r.server.URL, TokenFile: forgetest.TokenFile(t, token), Now: r.Clock.Now, EnvironmentURL: "https://fleet.example.com"}); err != nil {
		t.Fatal(err)
	}
	r.Restart(r.forge)
	return r
}

// The environment is made once, with its URL; one deployment per commit
// and environment, its status following the verdict.
func TestDeploymentFollowsTheVerdict(t *testing.T) {
	r := newRig(t)
	r.Decide("prod", sha, rollout.VerdictApplying, "")
	r.FlushAll()
	r.Clock.Add(time.Minute)
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	r.FlushAll()
	r.Decide("prod", sha2, rollout.VerdictApplying, "")
	r.FlushAll()
	r.Decide("prod", sha2, rollout.VerdictFailed, "apps: HealthCheckFailed")
	r.FlushAll()

	envs := r.server.Environments(project)
	if len(envs) != 1 || envs[0].Name != "prod" || envs[0].ExternalURL != "https://fleet.example.com" {
		t.Fatalf("environments %+v: want prod, made once with its URL", envs)
	}
	deps := r.server.Deployments(project)
	if len(deps) != 2 {
		t.Fatalf("%d deployments, want one per commit: %+v", len(deps), deps)
	}
	for i, want := range [][]string{{"running", "success"}, {"running", "failed"}} {
		d := deps[i]
		if d.Environment != "prod" || d.Ref != "main" || d.Tag || !slices.Equal(d.Statuses, want) {
			t.Errorf("deployment %+v: want environment prod, ref main, statuses %v", d, want)
		}
	}
	if p := r.Record("prod", sha2); p.Sent != rollout.VerdictFailed || p.Ref != strconv.FormatInt(deps[1].ID, 10) {
		t.Errorf("outbox record %+v", p)
	}
}

// GitLab's transitions: a verdict decided before the first delivery makes
// a running deployment and finishes it; superseded while running cancels
// it; superseded after it succeeded leaves it a success.
func TestTransitions(t *testing.T) {
	r := newRig(t)
	r.Decide("prod", sha, rollout.VerdictApplying, "")
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	r.FlushAll()
	r.Decide("prod", sha, rollout.VerdictSuperseded, "")
	r.FlushAll()
	r.Decide("staging", sha2, rollout.VerdictApplying, "")
	r.FlushAll()
	r.Decide("staging", sha2, rollout.VerdictSuperseded, "")
	r.FlushAll()
	deps := r.server.Deployments(project)
	if len(deps) != 2 || !slices.Equal(deps[0].Statuses, []string{"running", "success"}) || !slices.Equal(deps[1].Statuses, []string{"running", "canceled"}) {
		t.Fatalf("deployments %+v", deps)
	}
}

// A crash after the deployment was made and before its id was recorded:
// the environment's deployment of the commit is found again.
func TestDeploymentFoundAgainAfterCrash(t *testing.T) {
	r := newRig(t)
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	u := forge.Update{Repo: r.Repo, Environment: "prod", Commit: sha, Cluster: "prod", Revision: "main@sha1:" + sha}
	made, err := r.forge.Ensure(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	r.Restart(r.forge)
	r.FlushAll()
	deps := r.server.Deployments(project)
	if len(deps) != 1 || strconv.FormatInt(deps[0].ID, 10) != made || !slices.Equal(deps[0].Statuses, []string{"running", "success"}) {
		t.Fatalf("deployments %+v: want the one made before the crash, finished", deps)
	}
	// Delivered again (the outcome not recorded): nothing changes.
	if err := r.forge.Status(context.Background(), made, forge.Update{Repo: r.Repo, Environment: "prod", Commit: sha, State: forge.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	if deps := r.server.Deployments(project); len(deps[0].Statuses) != 2 {
		t.Fatalf("statuses %v after a repeated delivery", deps[0].Statuses)
	}
}

// GitLab's refusals: 429 waits for Retry-After; a wrong token is
// dead-lettered with GitLab's message.
func TestRefusals(t *testing.T) {
	r := newRig(t)
	r.server.Inject(forgetest.Fault{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"30"}}, Body: `{"message":"Retry later"}`})
	r.Decide("prod", sha, rollout.VerdictApplied, "")
	if next := r.D.Flush(context.Background()); !next.Equal(forgetest.T0.Add(30 * time.Second)) {
		t.Fatalf("next %v, want Retry-After", next)
	}
	r.Clock.Add(30 * time.Second)
	r.FlushAll()

	bad, err := gitlab.New(gitlab.Options{URL: r.server.URL, TokenFile: forgetest.TokenFile(t, "glpat-wrong"), Now: r.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Restart(bad)
	r.Decide("prod", sha2, rollout.VerdictApplied, "")
	r.FlushAll()
	if p := r.Record("prod", sha2); !p.Dead || p.LastError != "401 Unauthorized: 401 Unauthorized" {
		t.Fatalf("record %+v: want dead-lettered with GitLab's message", p)
	}
}
