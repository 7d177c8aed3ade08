package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/gitlab"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// forgeConfig is the forge part of serve's configuration: GitHub's or
// GitLab's deployments show the verdicts when a token file is given.
type forgeConfig struct {
	apiURL, tokenFile, repo, envURL         *string
	production, transient                   *bool
	glURL, glTokenFile, glProject, glEnvURL *string
	repoMap                                 *string
	alertAfter                              *time.Duration

	repos forge.Repos
}

func (c *forgeConfig) flags(f *flags) {
	c.apiURL = f.String("github-api-url", "FDN_GITHUB_API_URL", github.DefaultAPIURL, "GitHub's REST API: https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3")
	c.tokenFile = f.String("github-token-file", "FDN_GITHUB_TOKEN_FILE", "", "file holding a GitHub token that may write deployments: each rollout's verdict is then a deployment of its commit")
	c.repo = f.String("github-repo", "FDN_GITHUB_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none (with events only, or a source on no forge)")
	c.envURL = f.String("github-environment-url", "FDN_GITHUB_ENVIRONMENT_URL", "", "environment_url of each deployment status (the deployed application's address)")
	c.production = f.Bool("github-production-environment", "FDN_GITHUB_PRODUCTION_ENVIRONMENT", false, "mark the deployments' environments as production")
	c.transient = f.Bool("github-transient-environment", "FDN_GITHUB_TRANSIENT_ENVIRONMENT", false, "mark the deployments' environments as transient (no longer exist once inactive)")
	c.glURL = f.String("gitlab-url", "FDN_GITLAB_URL", gitlab.DefaultURL, "the GitLab instance: https://gitlab.com or a self-managed one's URL")
	c.glTokenFile = f.String("gitlab-token-file", "FDN_GITLAB_TOKEN_FILE", "", "file holding a GitLab token with the api scope: each rollout's verdict is then a GitLab deployment of its commit")
	c.glProject = f.String("gitlab-project", "FDN_GITLAB_PROJECT", "", "GROUP/PROJECT (subgroups too): the project of rollouts whose source names none")
	c.repoMap = f.String("forge-repos", "FDN_FORGE_REPOS", "", "sources' repositories, over what the sources name: namespace/name=OWNER/REPO,...")
	c.glEnvURL = f.String("gitlab-environment-url", "FDN_GITLAB_ENVIRONMENT_URL", "", "external_url of the environments made for the clusters")
	c.alertAfter = f.Duration("forge-alert-after", "FDN_FORGE_ALERT_AFTER", 15*time.Minute, "a verdict the forge has not taken for longer is reported: a /readyz warning")
}

// enabled reports whether a forge shows the verdicts.
func (c *forgeConfig) enabled() bool { return *c.tokenFile != "" || *c.glTokenFile != "" }

// name names the forge configured, for the pages.
func (c *forgeConfig) name() string {
	if *c.glTokenFile != "" {
		return "GitLab"
	}
	return "GitHub"
}

// finish validates the forge flags once parsed: one forge at most.
func (c *forgeConfig) finish() error {
	switch {
	case *c.tokenFile != "" && *c.glTokenFile != "":
		return errors.New("--github-token-file and --gitlab-token-file: one forge shows the verdicts, not two")
	case *c.repo != "" && *c.tokenFile == "":
		return errors.New("--github-repo needs --github-token-file")
	case *c.glProject != "" && *c.glTokenFile == "":
		return errors.New("--gitlab-project needs --gitlab-token-file")
	case *c.repoMap != "" && !c.enabled():
		return errors.New("--forge-repos needs --github-token-file or --gitlab-token-file")
	case *c.tokenFile != "":
		c.repos.Host = forge.WebHost(*c.apiURL)
		if *c.repo != "" {
			r, err := forge.ParseRepo(*c.repo)
			if err != nil || strings.Count(*c.repo, "/") != 1 {
				return fmt.Errorf("--github-repo %q: want OWNER/REPO", *c.repo)
			}
			c.repos.Default = &r
		}
	case *c.glTokenFile != "":
		c.repos.Host = forge.WebHost(*c.glURL)
		if *c.glProject != "" {
			r, err := forge.ParseRepo(*c.glProject)
			if err != nil {
				return fmt.Errorf("--gitlab-project: %w", err)
			}
			c.repos.Default = &r
		}
	}
	c.repos.Map = map[string]forge.Repo{}
	for _, kv := range strings.Split(*c.repoMap, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		src, repo, ok := strings.Cut(kv, "=")
		r, err := forge.ParseRepo(repo)
		if ns, name, found := strings.Cut(src, "/"); !ok || !found || ns == "" || name == "" || strings.Contains(name, "/") || err != nil {
			return fmt.Errorf("--forge-repos: %q is not namespace/name=OWNER/REPO", kv)
		}
		c.repos.Map[src] = r
	}
	if *c.alertAfter <= 0 {
		return fmt.Errorf("--forge-alert-after must be positive, got %s", *c.alertAfter)
	}
	return nil
}

// dispatcher builds the forge's dispatcher, nil when no forge is
// configured; externalURL makes each status link to the rollout's page,
// and sourceURL reads what a source names from the cluster.
func (c *forgeConfig) dispatcher(db *store.DB, eng *engine.Engine, externalURL string, sourceURL func(kind, ns, name string) (string, bool),
	log *slog.Logger, reg prometheus.Registerer) (*forge.Dispatcher, error) {
	if !c.enabled() {
		return nil, nil
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	var f forge.Forge
	var err error
	if *c.glTokenFile != "" {
		f, err = gitlab.New(gitlab.Options{URL: *c.glURL, TokenFile: *c.glTokenFile, EnvironmentURL: *c.glEnvURL, HTTP: hc})
	} else {
		f, err = github.New(github.Options{
			APIURL: *c.apiURL, TokenFile: *c.tokenFile, EnvironmentURL: *c.envURL,
			Production: *c.production, Transient: *c.transient, HTTP: hc,
		})
	}
	if err != nil {
		return nil, err
	}
	c.repos.URL = sourceURL
	cfg := forge.Config{Repo: c.repos.Repo, AlertAfter: *c.alertAfter}
	if externalURL = strings.TrimRight(externalURL, "/"); externalURL != "" {
		cfg.LogURL = func(k rollout.Key) string { return externalURL + edge.RolloutPath(k) }
	}
	views := func(k rollout.Key) (*rollout.View, error) {
		return eng.Lookup(engine.Query{Cluster: k.Cluster, Hash: k.Hash})
	}
	def := "none"
	if c.repos.Default != nil {
		def = c.repos.Default.String()
	}
	log.Info("verdicts shown as deployments", "forge", f.Name(), "host", c.repos.Host, "default_repo", def, "mapped_sources", len(c.repos.Map))
	return forge.NewDispatcher(db, f, views, cfg, log, time.Now, reg), nil
}
