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
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/gitea"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/gitlab"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// forgeConfig is the forge part of serve's configuration: GitHub's or
// GitLab's deployments, or Gitea's commit statuses, show the verdicts when
// that forge's token file is given (one forge at a time).
type forgeConfig struct {
	gh struct {
		apiURL, tokenFile, repo, envURL *string
		appID, installation             *int
		appKeyFile                      *string
		production, transient, status   *bool
	}
	gl         struct{ url, tokenFile, project, envURL *string }
	gt         struct{ url, tokenFile, repo *string }
	repoMap    *string
	envMap     *string
	alertAfter *time.Duration

	repos forge.Repos
	envs  map[string]string
}

func (c *forgeConfig) flags(f *flags) {
	c.gh.apiURL = f.String("github-api-url", "FDN_GITHUB_API_URL", github.DefaultAPIURL, "GitHub's REST API: https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3")
	c.gh.tokenFile = f.String("github-token-file", "FDN_GITHUB_TOKEN_FILE", "", "file holding a GitHub token that may write deployments: each rollout's verdict is then a deployment of its commit")
	c.gh.repo = f.String("github-repo", "FDN_GITHUB_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none (with events only, or a source on no forge)")
	c.gh.envURL = f.String("github-environment-url", "FDN_GITHUB_ENVIRONMENT_URL", "", "environment_url of each deployment status (the deployed application's address)")
	c.gh.production = f.Bool("github-production-environment", "FDN_GITHUB_PRODUCTION_ENVIRONMENT", false, "mark the deployments' environments as production")
	c.gh.transient = f.Bool("github-transient-environment", "FDN_GITHUB_TRANSIENT_ENVIRONMENT", false, "mark the deployments' environments as transient (no longer exist once inactive)")
	c.gh.appID = f.Int("github-app-id", "FDN_GITHUB_APP_ID", 0, "act as this GitHub App (instead of --github-token-file): its installation token, made with its private key, refreshed before it expires")
	c.gh.installation = f.Int("github-app-installation-id", "FDN_GITHUB_APP_INSTALLATION_ID", 0, "the GitHub App's installation on the repositories")
	c.gh.appKeyFile = f.String("github-app-private-key-file", "FDN_GITHUB_APP_PRIVATE_KEY_FILE", "", "file holding the GitHub App's private key (PEM)")
	c.gh.status = f.Bool("github-commit-status", "FDN_GITHUB_COMMIT_STATUS", false, "also post one commit status per cluster (context flux-deploy/<cluster>) with each deployment status")
	c.gl.url = f.String("gitlab-url", "FDN_GITLAB_URL", gitlab.DefaultURL, "the GitLab instance: https://gitlab.com or a self-managed one's URL")
	c.gl.tokenFile = f.String("gitlab-token-file", "FDN_GITLAB_TOKEN_FILE", "", "file holding a GitLab token with the api scope: each rollout's verdict is then a GitLab deployment of its commit")
	c.gl.project = f.String("gitlab-project", "FDN_GITLAB_PROJECT", "", "GROUP/PROJECT (subgroups too): the project of rollouts whose source names none")
	c.gl.envURL = f.String("gitlab-environment-url", "FDN_GITLAB_ENVIRONMENT_URL", "", "external_url of the environments made for the clusters")
	c.gt.url = f.String("gitea-url", "FDN_GITEA_URL", "", "the Gitea or Forgejo instance's URL")
	c.gt.tokenFile = f.String("gitea-token-file", "FDN_GITEA_TOKEN_FILE", "", "file holding a Gitea or Forgejo token with write:repository: each rollout's verdict is then a commit status per cluster")
	c.gt.repo = f.String("gitea-repo", "FDN_GITEA_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none")
	c.repoMap = f.String("forge-repos", "FDN_FORGE_REPOS", "", "sources' repositories, over what the sources name: namespace/name=OWNER/REPO,...")
	c.envMap = f.String("forge-environments", "FDN_FORGE_ENVIRONMENTS", "", "the forge's environment of a cluster, when not the cluster's name: cluster=environment,...")
	c.alertAfter = f.Duration("forge-alert-after", "FDN_FORGE_ALERT_AFTER", 15*time.Minute, "a verdict the forge has not taken for longer is reported: a /readyz warning")
}

// chosen names the forge whose token file is given: "", "GitHub",
// "GitLab" or "Gitea".
func (c *forgeConfig) chosen() string {
	switch {
	case *c.gh.tokenFile != "", *c.gh.appID != 0:
		return "GitHub"
	case *c.gl.tokenFile != "":
		return "GitLab"
	case *c.gt.tokenFile != "":
		return "Gitea"
	}
	return ""
}

// enabled reports whether a forge shows the verdicts.
func (c *forgeConfig) enabled() bool { return c.chosen() != "" }

// finish validates the forge flags once parsed: one forge at most, the
// repository flags of that one.
func (c *forgeConfig) finish() error {
	tokens := 0
	for _, set := range []bool{*c.gh.tokenFile != "" || *c.gh.appID != 0, *c.gl.tokenFile != "", *c.gt.tokenFile != ""} {
		if set {
			tokens++
		}
	}
	app := *c.gh.appID != 0 || *c.gh.installation != 0 || *c.gh.appKeyFile != ""
	switch {
	case tokens > 1:
		return errors.New("--github-token-file (or a GitHub App), --gitlab-token-file, --gitea-token-file: one forge shows the verdicts, not two")
	case app && (*c.gh.appID <= 0 || *c.gh.installation <= 0 || *c.gh.appKeyFile == ""):
		return errors.New("a GitHub App needs --github-app-id, --github-app-installation-id and --github-app-private-key-file")
	case app && *c.gh.tokenFile != "":
		return errors.New("--github-token-file or a GitHub App, not both")
	case *c.gh.repo != "" && c.chosen() != "GitHub":
		return errors.New("--github-repo needs --github-token-file or a GitHub App")
	case *c.gl.project != "" && *c.gl.tokenFile == "":
		return errors.New("--gitlab-project needs --gitlab-token-file")
	case (*c.gt.repo != "" || *c.gt.url != "") && *c.gt.tokenFile == "":
		return errors.New("--gitea-url and --gitea-repo need --gitea-token-file")
	case *c.gt.tokenFile != "" && *c.gt.url == "":
		return errors.New("--gitea-token-file needs --gitea-url")
	case (*c.repoMap != "" || *c.envMap != "") && !c.enabled():
		return errors.New("--forge-repos and --forge-environments need a forge's token file")
	}
	var def string
	switch c.chosen() {
	case "GitHub":
		c.repos.Host, def = forge.WebHost(*c.gh.apiURL), *c.gh.repo
		if strings.Count(def, "/") > 1 {
			return fmt.Errorf("--github-repo %q: want OWNER/REPO", def)
		}
	case "GitLab":
		c.repos.Host, def = forge.WebHost(*c.gl.url), *c.gl.project
	case "Gitea":
		c.repos.Host, def = forge.WebHost(*c.gt.url), *c.gt.repo
	}
	if def != "" {
		r, err := forge.ParseRepo(def)
		if err != nil {
			return fmt.Errorf("the %s repository: %w", c.chosen(), err)
		}
		c.repos.Default = &r
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
	c.envs = map[string]string{}
	for _, kv := range strings.Split(*c.envMap, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		cluster, env, ok := strings.Cut(kv, "=")
		if !ok || cluster == "" || env == "" {
			return fmt.Errorf("--forge-environments: %q is not cluster=environment", kv)
		}
		c.envs[cluster] = env
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
	hc := &http.Client{Timeout: 30 * time.Second}
	var f forge.Forge
	var err error
	switch c.chosen() {
	case "":
		return nil, nil
	case "GitHub":
		opts := github.Options{
			APIURL: *c.gh.apiURL, TokenFile: *c.gh.tokenFile, EnvironmentURL: *c.gh.envURL,
			Production: *c.gh.production, Transient: *c.gh.transient, CommitStatus: *c.gh.status, HTTP: hc,
		}
		if *c.gh.appID != 0 {
			opts.App = &github.App{ID: int64(*c.gh.appID), InstallationID: int64(*c.gh.installation), PrivateKeyFile: *c.gh.appKeyFile}
		}
		f, err = github.New(opts)
	case "GitLab":
		f, err = gitlab.New(gitlab.Options{URL: *c.gl.url, TokenFile: *c.gl.tokenFile, EnvironmentURL: *c.gl.envURL, HTTP: hc})
	case "Gitea":
		f, err = gitea.New(gitea.Options{URL: *c.gt.url, TokenFile: *c.gt.tokenFile, HTTP: hc})
	}
	if err != nil {
		return nil, err
	}
	c.repos.URL = sourceURL
	cfg := forge.Config{Repo: c.repos.Repo, AlertAfter: *c.alertAfter, Environments: c.envs}
	if externalURL = strings.TrimRight(externalURL, "/"); externalURL != "" {
		cfg.LogURL = func(k rollout.Key) string { return externalURL + edge.RolloutPath(k) }
	}
	views := func(k rollout.Key) (*rollout.View, error) {
		v, err := eng.Lookup(engine.Query{Cluster: k.Cluster, Hash: k.Hash})
		if errors.Is(err, engine.ErrNotFound) {
			return nil, nil // collected: nothing to show
		}
		return v, err
	}
	def := "none"
	if c.repos.Default != nil {
		def = c.repos.Default.String()
	}
	log.Info("verdicts shown as deployments", "forge", f.Name(), "host", c.repos.Host, "default_repo", def, "mapped_sources", len(c.repos.Map))
	return forge.NewDispatcher(db, f, views, cfg, log, time.Now, reg), nil
}
