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
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// forgeConfig is the forge part of serve's configuration: GitHub's
// deployments show the verdicts when a token file is given.
type forgeConfig struct {
	apiURL, tokenFile, repo, envURL *string
	production, transient           *bool
	alertAfter                      *time.Duration

	target forge.Repo
}

func (c *forgeConfig) flags(f *flags) {
	c.apiURL = f.String("github-api-url", "FDN_GITHUB_API_URL", github.DefaultAPIURL, "GitHub's REST API: https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3")
	c.tokenFile = f.String("github-token-file", "FDN_GITHUB_TOKEN_FILE", "", "file holding a GitHub token that may write deployments: each rollout's verdict is then a deployment of its commit")
	c.repo = f.String("github-repo", "FDN_GITHUB_REPO", "", "OWNER/REPO: the repository of the commits the rollouts deploy")
	c.envURL = f.String("github-environment-url", "FDN_GITHUB_ENVIRONMENT_URL", "", "environment_url of each deployment status (the deployed application's address)")
	c.production = f.Bool("github-production-environment", "FDN_GITHUB_PRODUCTION_ENVIRONMENT", false, "mark the deployments' environments as production")
	c.transient = f.Bool("github-transient-environment", "FDN_GITHUB_TRANSIENT_ENVIRONMENT", false, "mark the deployments' environments as transient (no longer exist once inactive)")
	c.alertAfter = f.Duration("forge-alert-after", "FDN_FORGE_ALERT_AFTER", 15*time.Minute, "a verdict the forge has not taken for longer is reported: a /readyz warning")
}

// enabled reports whether a forge shows the verdicts.
func (c *forgeConfig) enabled() bool { return *c.tokenFile != "" }

// finish validates the forge flags once parsed.
func (c *forgeConfig) finish() error {
	if !c.enabled() {
		if *c.repo != "" {
			return errors.New("--github-repo needs --github-token-file")
		}
		return nil
	}
	if *c.repo == "" {
		return errors.New("--github-token-file needs --github-repo (the repository of the rollouts' commits)")
	}
	var err error
	if c.target, err = forge.ParseRepo(*c.repo); err != nil {
		return fmt.Errorf("--github-repo: %w", err)
	}
	if strings.Count(*c.repo, "/") != 1 {
		return fmt.Errorf("--github-repo %q: want OWNER/REPO", *c.repo)
	}
	if *c.alertAfter <= 0 {
		return fmt.Errorf("--forge-alert-after must be positive, got %s", *c.alertAfter)
	}
	return nil
}

// dispatcher builds the GitHub forge's dispatcher, nil when no forge is
// configured; externalURL makes each status link to the rollout's page.
func (c *forgeConfig) dispatcher(db *store.DB, eng *engine.Engine, externalURL string, log *slog.Logger, reg prometheus.Registerer) (*forge.Dispatcher, error) {
	if !c.enabled() {
		return nil, nil
	}
	gh, err := github.New(github.Options{
		APIURL: *c.apiURL, TokenFile: *c.tokenFile, EnvironmentURL: *c.envURL,
		Production: *c.production, Transient: *c.transient,
		HTTP: &http.Client{Timeout: 30 * time.Second},
	})
	if err != nil {
		return nil, err
	}
	cfg := forge.Config{
		Repo:       func(*rollout.View) (forge.Repo, bool) { return c.target, true },
		AlertAfter: *c.alertAfter,
	}
	if externalURL = strings.TrimRight(externalURL, "/"); externalURL != "" {
		cfg.LogURL = func(k rollout.Key) string { return externalURL + edge.RolloutPath(k) }
	}
	views := func(k rollout.Key) (*rollout.View, error) {
		return eng.Lookup(engine.Query{Cluster: k.Cluster, Hash: k.Hash})
	}
	log.Info("verdicts shown as GitHub deployments", "api", *c.apiURL, "repo", c.target.String())
	return forge.NewDispatcher(db, gh, views, cfg, log, time.Now, reg), nil
}
