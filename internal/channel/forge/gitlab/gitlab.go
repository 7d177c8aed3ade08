// Package gitlab shows verdicts as GitLab deployments: one per commit and
// environment (the cluster), the environment made when missing, its status
// following the verdict within GitLab's transitions (running only from
// created; a finished deployment is not cancelled).
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// DefaultURL is gitlab.com.
const DefaultURL = "https://gitlab.com"

// maxPages bounds the search for a commit's deployment among the
// environment's newest ones (100 a page): the deployment of a commit the
// service is still delivering is among its latest.
const maxPages = 5

// Options configure the GitLab forge.
type Options struct {
	// URL is the instance: DefaultURL or a self-managed one's.
	URL       string
	TokenFile string
	// EnvironmentURL, when set, is the external_url of the environments
	// the forge makes.
	EnvironmentURL string
	HTTP           *http.Client
	Now            func() time.Time
}

// Forge is GitLab's deployments API.
type Forge struct {
	c    *gl.Client
	opts Options
}

// New makes the GitLab forge.
func New(opts Options) (*Forge, error) {
	if opts.URL == "" {
		opts.URL = DefaultURL
	}
	tok, err := secret.NewFile(opts.TokenFile, "token")
	if err != nil {
		return nil, fmt.Errorf("gitlab %w", err)
	}
	if opts.HTTP == nil {
		opts.HTTP = http.DefaultClient
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// The dispatcher retries, on its clock, honouring Retry-After: the
	// client's own retries would wait a second time.
	c, err := gl.NewAuthSourceClient(&auth{tok}, gl.WithBaseURL(strings.TrimSuffix(opts.URL, "/")+"/api/v4"),
		gl.WithHTTPClient(opts.HTTP), gl.WithoutRetries())
	if err != nil {
		return nil, fmt.Errorf("gitlab: URL %q: %w", opts.URL, err)
	}
	return &Forge{c: c, opts: opts}, nil
}

// Name implements forge.Forge.
func (f *Forge) Name() string { return "gitlab" }

// status is GitLab's deployment status of a forge state.
func status(s forge.State) gl.DeploymentStatusValue {
	switch s {
	case forge.StateInProgress:
		return gl.DeploymentStatusRunning
	case forge.StateSuccess:
		return gl.DeploymentStatusSuccess
	case forge.StateFailure:
		return gl.DeploymentStatusFailed
	}
	return gl.DeploymentStatusCanceled
}

// Ensure implements forge.Forge: the environment's deployment of u's
// commit (there is one per commit and environment), else a new one,
// running; the environment is made first when missing.
func (f *Forge) Ensure(ctx context.Context, u forge.Update) (string, error) {
	project := u.Repo.String()
	env := u.Environment
	envs, _, err := f.c.Environments.ListEnvironments(project, &gl.ListEnvironmentsOptions{Name: &env}, gl.WithContext(ctx))
	if err != nil {
		return "", f.classify(err)
	}
	if len(envs) == 0 {
		opt := &gl.CreateEnvironmentOptions{Name: &env}
		if f.opts.EnvironmentURL != "" {
			opt.ExternalURL = &f.opts.EnvironmentURL
		}
		if _, _, err := f.c.Environments.CreateEnvironment(project, opt, gl.WithContext(ctx)); err != nil {
			return "", f.classify(err)
		}
	}
	list := &gl.ListProjectDeploymentsOptions{Environment: &env, OrderBy: gl.Ptr("id"), Sort: gl.Ptr("desc"), ListOptions: gl.ListOptions{PerPage: 100}}
	for page := 1; page <= maxPages; page++ {
		list.Page = int64(page)
		deps, resp, err := f.c.Deployments.ListProjectDeployments(project, list, gl.WithContext(ctx))
		if err != nil {
			return "", f.classify(err)
		}
		for _, d := range deps {
			if d.SHA == u.Commit {
				return strconv.FormatInt(d.ID, 10), nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
	}
	ref, tag := refOf(u)
	d, _, err := f.c.Deployments.CreateProjectDeployment(project, &gl.CreateProjectDeploymentOptions{
		Environment: &env, Ref: &ref, SHA: &u.Commit, Tag: &tag, Status: gl.Ptr(gl.DeploymentStatusRunning),
	}, gl.WithContext(ctx))
	if err != nil {
		return "", f.classify(err)
	}
	return strconv.FormatInt(d.ID, 10), nil
}

// refOf is the branch or tag a Flux revision names ("main@sha1:…",
// "refs/tags/v1@sha1:…"), else the commit itself.
func refOf(u forge.Update) (string, bool) {
	rev, err := flux.ParseRevision(u.Revision)
	ref := rev.Ref
	if err != nil || ref == "" {
		return u.Commit, false
	}
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return t, true
	}
	return strings.TrimPrefix(ref, "refs/heads/"), false
}

// Status implements forge.Forge. GitLab takes a deployment to running only
// from created and never back from a finished state to running; a
// deployment already in the state wanted is left as it is (a delivery
// repeated after a crash).
func (f *Forge) Status(ctx context.Context, ref string, u forge.Update) error {
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return &outbox.Error{Message: fmt.Sprintf("deployment id %q: %v", ref, err)}
	}
	project := u.Repo.String()
	d, _, err := f.c.Deployments.GetProjectDeployment(project, id, gl.WithContext(ctx))
	if err != nil {
		return f.classify(err)
	}
	want := status(u.State)
	cur := gl.DeploymentStatusValue(d.Status)
	switch {
	case cur == want,
		want == gl.DeploymentStatusRunning && cur != gl.DeploymentStatusCreated,
		// Superseded after it was applied: GitLab shows the newer one as
		// the environment's last; this one stays a success.
		want == gl.DeploymentStatusCanceled && cur == gl.DeploymentStatusSuccess:
		return nil
	}
	if _, _, err := f.c.Deployments.UpdateProjectDeployment(project, id, &gl.UpdateProjectDeploymentOptions{Status: &want}, gl.WithContext(ctx)); err != nil {
		return f.classify(err)
	}
	return nil
}

// classify turns client-go's errors into forge.Errors by the response's
// status and headers; an error without a response (the network) is
// transient.
func (f *Forge) classify(err error) error {
	var er *gl.ErrorResponse
	if !errors.As(err, &er) || er.Response == nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	// client-go renders GitLab's {"message": …} as "{message: …}".
	msg := er.Message
	if m, ok := strings.CutPrefix(msg, "{message: "); ok {
		msg = strings.TrimSuffix(m, "}")
	}
	if msg == "" {
		msg = strings.TrimSpace(string(er.Body))
	}
	return outbox.Classify(er.Response.StatusCode, er.Response.Header, msg, f.opts.Now())
}

// auth gives client-go the token, read again when its file changed.
type auth struct{ token *secret.File }

func (a *auth) Init(context.Context, *gl.Client) error { return nil }

func (a *auth) Header(context.Context) (string, string, error) {
	tok, err := a.token.Get()
	if err != nil {
		return "", "", err
	}
	return gl.AccessTokenHeaderName, tok, nil
}
