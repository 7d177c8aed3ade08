// Package github shows verdicts as GitHub deployments: one per commit and
// environment (the cluster), made with auto_merge false and no required
// contexts (the commit is already deployed: GitHub must neither merge nor
// wait for checks), found again by the marker in its payload, its
// statuses following the verdict.
package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v84/github"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// DefaultAPIURL is github.com's REST API.
const DefaultAPIURL = "https://api.github.com"

// Marker is the key of a deployment's payload that says this service made
// it, and for which rollout: {"flux-deploy-notifier": {"cluster": ...,
// "revision": ...}}.
const Marker = "flux-deploy-notifier"

// Options configure the GitHub forge.
type Options struct {
	// APIURL is the REST API's base: DefaultAPIURL, or a GitHub Enterprise
	// Server's https://HOST/api/v3.
	APIURL string
	// TokenFile holds the token (a Secret's key mounted as a file): read
	// again when it changes, so that a rotated token is used at once.
	TokenFile string
	// App acts as a GitHub App's installation; TokenFile is not read then
	// (the caller's flags allow one of them).
	App *App
	// EnvironmentURL, when set, is each deployment status's
	// environment_url; Transient and Production set the deployment's
	// transient_environment and production_environment.
	EnvironmentURL string
	Transient      bool
	Production     bool
	// CommitStatus also posts one commit status per cluster (context
	// flux-deploy/<environment>) with each deployment status: for branch
	// protection and the pull request's checks, which show no deployment.
	CommitStatus bool
	// HTTP is the client requests go through (its transport's TLS roots).
	HTTP *http.Client
	Now  func() time.Time
}

// Forge is GitHub's deployments API.
type Forge struct {
	c    *gh.Client
	opts Options
}

// New makes the GitHub forge; the token file is read at each request
// that finds it changed.
func New(opts Options) (*Forge, error) {
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	base, err := url.Parse(strings.TrimSuffix(opts.APIURL, "/") + "/")
	if err != nil || base.Host == "" || base.Scheme != "https" && base.Scheme != "http" {
		return nil, fmt.Errorf("github: API URL %q: want an http(s) URL", opts.APIURL)
	}
	hc := opts.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var token func(context.Context) (string, error)
	switch {
	case opts.App != nil:
		app, err := newAppToken(*opts.App, base, &http.Client{Transport: transport(hc), Timeout: hc.Timeout}, opts.Now)
		if err != nil {
			return nil, err
		}
		token = app.Get
	default:
		tok, err := secret.NewFile(opts.TokenFile, "token")
		if err != nil {
			return nil, fmt.Errorf("github %w", err)
		}
		token = func(context.Context) (string, error) { return tok.Get() }
	}
	client := *hc
	client.Transport = &auth{next: transport(hc), token: token}
	c := gh.NewClient(&client)
	c.BaseURL = base
	c.UserAgent = "flux-deploy-notifier"
	// The dispatcher honours the limits GitHub answers with, on its clock,
	// for every forge alike: go-github's own wait, on the wall clock, would
	// be a second one.
	c.DisableRateLimitCheck = true
	return &Forge{c: c, opts: opts}, nil
}

func transport(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// Name implements forge.Forge.
func (f *Forge) Name() string { return "github" }

// Ensure implements forge.Forge: the deployment of u's commit and
// environment that carries the marker of u's rollout, else a new one.
func (f *Forge) Ensure(ctx context.Context, u forge.Update) (string, error) {
	opts := &gh.DeploymentsListOptions{SHA: u.Commit, Environment: u.Environment, ListOptions: gh.ListOptions{PerPage: 100}}
	for {
		deps, resp, err := f.c.Repositories.ListDeployments(ctx, u.Repo.Owner, u.Repo.Name, opts)
		if err != nil {
			return "", f.classify(err)
		}
		for _, d := range deps {
			if marked(d.Payload, u) {
				return strconv.FormatInt(d.GetID(), 10), nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	req := &gh.DeploymentRequest{
		Ref:                   gh.Ptr(u.Commit),
		Task:                  gh.Ptr("deploy"),
		AutoMerge:             gh.Ptr(false),
		RequiredContexts:      &[]string{},
		Payload:               payload(u),
		Environment:           gh.Ptr(u.Environment),
		Description:           gh.Ptr(forge.Clean("Flux: "+u.Revision+" on "+u.Cluster, forge.MaxDescription)),
		TransientEnvironment:  gh.Ptr(f.opts.Transient),
		ProductionEnvironment: gh.Ptr(f.opts.Production),
	}
	d, _, err := f.c.Repositories.CreateDeployment(ctx, u.Repo.Owner, u.Repo.Name, req)
	if err != nil {
		return "", f.classify(err)
	}
	return strconv.FormatInt(d.GetID(), 10), nil
}

// Status implements forge.Forge.
func (f *Forge) Status(ctx context.Context, ref string, u forge.Update) error {
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return &outbox.Error{Message: fmt.Sprintf("deployment id %q: %v", ref, err)}
	}
	req := &gh.DeploymentStatusRequest{
		State:       gh.Ptr(string(u.State)),
		Description: gh.Ptr(u.Description),
		Environment: gh.Ptr(u.Environment),
		// A success makes the environment's earlier deployments inactive:
		// GitHub shows the one deployed.
		AutoInactive: gh.Ptr(true),
	}
	if u.LogURL != "" {
		req.LogURL = gh.Ptr(u.LogURL)
	}
	if f.opts.EnvironmentURL != "" {
		req.EnvironmentURL = gh.Ptr(f.opts.EnvironmentURL)
	}
	if _, _, err := f.c.Repositories.CreateDeploymentStatus(ctx, u.Repo.Owner, u.Repo.Name, id, req); err != nil {
		return f.classify(err)
	}
	if !f.opts.CommitStatus {
		return nil
	}
	return f.StatusOf(ctx, u, u.Commit, u.Description)
}

// Compares implements forge.Comparer: with commit statuses.
func (f *Forge) Compares() bool { return f.opts.CommitStatus }

// StatusOf implements forge.Comparer: the cluster's commit status.
func (f *Forge) StatusOf(ctx context.Context, u forge.Update, commit, desc string) error {
	st := gh.RepoStatus{State: gh.Ptr(forge.CommitState(u.State, "error")), Description: gh.Ptr(desc), Context: gh.Ptr(StatusContext + u.Environment)}
	if u.LogURL != "" {
		st.TargetURL = gh.Ptr(u.LogURL)
	}
	if _, _, err := f.c.Repositories.CreateStatus(ctx, u.Repo.Owner, u.Repo.Name, commit, st); err != nil {
		return f.classify(err)
	}
	return nil
}

// Between implements forge.Comparer through the compare API: the commits
// after base up to head, oldest first, its first page.
func (f *Forge) Between(ctx context.Context, repo forge.Repo, base, head string, max int) ([]string, error) {
	cmp, _, err := f.c.Repositories.CompareCommits(ctx, repo.Owner, repo.Name, base, head, &gh.ListOptions{PerPage: min(max, 100)})
	if err != nil {
		return nil, f.classify(err)
	}
	var out []string
	for _, c := range cmp.Commits {
		if len(out) == max {
			break
		}
		out = append(out, c.GetSHA())
	}
	return out, nil
}

// StatusContext is the prefix of the commit statuses' context; the
// environment follows it.
const StatusContext = "flux-deploy/"

func payload(u forge.Update) map[string]any {
	return map[string]any{Marker: map[string]string{"cluster": u.Cluster, "revision": u.Revision}}
}

// marked reports whether a deployment's payload names u's rollout.
func marked(p json.RawMessage, u forge.Update) bool {
	var m map[string]json.RawMessage
	var mk struct{ Cluster, Revision string }
	if json.Unmarshal(p, &m) != nil || json.Unmarshal(m[Marker], &mk) != nil {
		return false // a string payload, or another's
	}
	return mk.Cluster == u.Cluster && mk.Revision == u.Revision
}

// classify turns go-github's errors into forge.Errors by the response's
// status and headers; an error without a response (the network) is
// transient.
func (f *Forge) classify(err error) error {
	var (
		er *gh.ErrorResponse
		rl *gh.RateLimitError
		ab *gh.AbuseRateLimitError
	)
	var resp *http.Response
	msg := err.Error()
	var fe *outbox.Error
	switch {
	case errors.As(err, &fe): // the installation token's exchange
		return fe
	case errors.As(err, &rl):
		resp, msg = rl.Response, rl.Message
	case errors.As(err, &ab): // its RetryAfter is the headers' Classify reads
		resp, msg = ab.Response, ab.Message
	case errors.As(err, &er):
		resp, msg = er.Response, er.Message
		for _, e := range er.Errors {
			if e.Message != "" {
				msg += ": " + e.Message
			}
		}
	}
	if resp == nil {
		return &outbox.Error{Retry: true, Message: msg}
	}
	return outbox.Classify(resp.StatusCode, resp.Header, msg, f.opts.Now())
}

// auth adds the token to each request.
type auth struct {
	next  http.RoundTripper
	token func(context.Context) (string, error)
}

func (a *auth) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := a.token(r.Context())
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return a.next.RoundTrip(r)
}
