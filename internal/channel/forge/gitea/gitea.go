// Package gitea shows verdicts in Gitea and Forgejo, which have no
// deployments API: one commit status per cluster (context
// flux-deploy/<cluster>), never one per layer, following the verdict.
package gitea

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// Context is the prefix of the statuses' context; the cluster's name
// follows it.
const Context = "flux-deploy/"

// Options configure the Gitea forge.
type Options struct {
	// URL is the instance's (Gitea's or Forgejo's) base URL.
	URL       string
	TokenFile string
	HTTP      *http.Client
	Now       func() time.Time
}

// Forge is Gitea's commit status API, over plain HTTP.
type Forge struct {
	base  string
	token *secret.File
	opts  Options
}

// New makes the Gitea forge.
func New(opts Options) (*Forge, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("gitea: URL %q: want an http(s) URL", opts.URL)
	}
	tok, err := secret.NewFile(opts.TokenFile, "token")
	if err != nil {
		return nil, fmt.Errorf("gitea %w", err)
	}
	if opts.HTTP == nil {
		opts.HTTP = http.DefaultClient
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Forge{base: strings.TrimSuffix(opts.URL, "/") + "/api/v1", token: tok, opts: opts}, nil
}

// Name implements forge.Forge.
func (f *Forge) Name() string { return "gitea" }

// Ensure implements forge.Forge: a commit status is the record itself,
// posted again with each verdict under the cluster's context; there is
// no record to keep ("").
func (f *Forge) Ensure(context.Context, forge.Update) (string, error) { return "", nil }

// Status implements forge.Forge: POST /repos/{owner}/{repo}/statuses/{sha};
// the latest status of a context is the one Gitea shows, so a repeated
// delivery changes nothing people see.
func (f *Forge) Status(ctx context.Context, _ string, u forge.Update) error {
	return f.StatusOf(ctx, u, u.Commit, u.Description)
}

// Compares implements forge.Comparer: Gitea's statuses are commit
// statuses.
func (f *Forge) Compares() bool { return true }

// StatusOf implements forge.Comparer.
func (f *Forge) StatusOf(ctx context.Context, u forge.Update, commit, desc string) error {
	body, _ := json.Marshal(map[string]string{
		"state": forge.CommitState(u.State, "warning"), "context": Context + u.Environment,
		"description": desc, "target_url": u.LogURL,
	})
	return f.call(ctx, http.MethodPost, repoPath(u.Repo)+"/statuses/"+url.PathEscape(commit), body, nil)
}

// Between implements forge.Comparer: GET /repos/{owner}/{repo}/compare/{base}...{head}.
func (f *Forge) Between(ctx context.Context, repo forge.Repo, base, head string, max int) ([]string, error) {
	var out struct{ Commits []struct{ SHA string } }
	if err := f.call(ctx, http.MethodGet, repoPath(repo)+"/compare/"+url.PathEscape(base+"..."+head), nil, &out); err != nil {
		return nil, err
	}
	var shas []string
	for _, c := range out.Commits {
		if len(shas) == max {
			break
		}
		shas = append(shas, c.SHA)
	}
	return shas, nil
}

func repoPath(r forge.Repo) string {
	return "/repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name)
}

// call makes one API request, decoding a 2xx answer into out (when not
// nil) and classing any other.
func (f *Forge) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, f.base+path, bytes.NewReader(body))
	if err != nil {
		return &outbox.Error{Message: err.Error()}
	}
	tok, err := f.token.Get()
	if err != nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	req.Header.Set("Authorization", "token "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := f.opts.HTTP.Do(req)
	if err != nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		if out == nil {
			return nil
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out); err != nil {
			return &outbox.Error{Retry: true, Message: "decode Gitea's answer: " + err.Error()}
		}
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var e struct{ Message string }
	if json.Unmarshal(msg, &e) == nil && e.Message != "" {
		msg = []byte(e.Message)
	}
	fe := outbox.Classify(resp.StatusCode, resp.Header, strings.TrimSpace(string(msg)), f.opts.Now())
	if resp.StatusCode == http.StatusInternalServerError && strings.Contains(fe.Message, "object does not exist") {
		// Gitea answers a commit the repository lacks with a 500: no
		// retry makes it appear (a wrong repository).
		fe.Retry = false
	}
	return fe
}
