package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/gitea"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge/gitlab"
)

// forgeTable is every forge the verdicts can be shown on, each a row that
// registers its flags: a new forge is its package under internal/forge
// and one row here. The flags are validated here, once, and only here:
// the forge packages know options, not flags.
func forgeTable() []func(*flags) forgeRow {
	return []func(*flags) forgeRow{newGitHubRow, newGitLabRow, newGiteaRow}
}

// forgeRow is one forge's flags, once registered.
type forgeRow interface {
	name() string // as logs and pages say it
	// given reports whether its credentials are given: it then shows
	// the verdicts. credentials names those flags, for errors.
	given() bool
	credentials() string
	// check validates its flags once parsed, whether given or not.
	check() error
	host() string        // the web host of its repositories' URLs
	defaultRepo() string // the repository of rollouts whose source names none
	open(hc *http.Client) (forge.Forge, error)
}

type githubRow struct {
	apiURL, tokenFile, repo, envURL, appKeyFile *string
	appID, installation                         *int
	production, transient, status               *bool
}

func newGitHubRow(f *flags) forgeRow {
	return &githubRow{
		apiURL:       f.String("github-api-url", "FDN_GITHUB_API_URL", github.DefaultAPIURL, "GitHub's REST API: https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3"),
		tokenFile:    f.String("github-token-file", "FDN_GITHUB_TOKEN_FILE", "", "file holding a GitHub token that may write deployments: each rollout's verdict is then a deployment of its commit"),
		repo:         f.String("github-repo", "FDN_GITHUB_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none (with events only, or a source on no forge)"),
		envURL:       f.String("github-environment-url", "FDN_GITHUB_ENVIRONMENT_URL", "", "environment_url of each deployment status (the deployed application's address)"),
		production:   f.Bool("github-production-environment", "FDN_GITHUB_PRODUCTION_ENVIRONMENT", false, "mark the deployments' environments as production"),
		transient:    f.Bool("github-transient-environment", "FDN_GITHUB_TRANSIENT_ENVIRONMENT", false, "mark the deployments' environments as transient (no longer exist once inactive)"),
		appID:        f.Int("github-app-id", "FDN_GITHUB_APP_ID", 0, "act as this GitHub App (instead of --github-token-file): its installation token, made with its private key, refreshed before it expires"),
		installation: f.Int("github-app-installation-id", "FDN_GITHUB_APP_INSTALLATION_ID", 0, "the GitHub App's installation on the repositories"),
		appKeyFile:   f.String("github-app-private-key-file", "FDN_GITHUB_APP_PRIVATE_KEY_FILE", "", "file holding the GitHub App's private key (PEM)"),
		status:       f.Bool("github-commit-status", "FDN_GITHUB_COMMIT_STATUS", false, "also post one commit status per cluster (context flux-deploy/<cluster>) with each deployment status"),
	}
}

func (r *githubRow) name() string        { return "GitHub" }
func (r *githubRow) given() bool         { return *r.tokenFile != "" || *r.appID != 0 }
func (r *githubRow) credentials() string { return "--github-token-file (or a GitHub App)" }
func (r *githubRow) host() string        { return forge.WebHost(*r.apiURL) }
func (r *githubRow) defaultRepo() string { return *r.repo }

func (r *githubRow) check() error {
	app := *r.appID != 0 || *r.installation != 0 || *r.appKeyFile != ""
	switch {
	case app && (*r.appID <= 0 || *r.installation <= 0 || *r.appKeyFile == ""):
		return errors.New("a GitHub App needs --github-app-id, --github-app-installation-id and --github-app-private-key-file")
	case app && *r.tokenFile != "":
		return errors.New("--github-token-file or a GitHub App, not both")
	case *r.repo != "" && !r.given():
		return errors.New("--github-repo needs --github-token-file or a GitHub App")
	case strings.Count(*r.repo, "/") > 1:
		return fmt.Errorf("--github-repo %q: want OWNER/REPO", *r.repo)
	}
	return checkURL("--github-api-url", *r.apiURL)
}

func (r *githubRow) open(hc *http.Client) (forge.Forge, error) {
	opts := github.Options{
		APIURL: *r.apiURL, TokenFile: *r.tokenFile, EnvironmentURL: *r.envURL,
		Production: *r.production, Transient: *r.transient, CommitStatus: *r.status, HTTP: hc,
	}
	if *r.appID != 0 {
		opts.App = &github.App{ID: int64(*r.appID), InstallationID: int64(*r.installation), PrivateKeyFile: *r.appKeyFile}
	}
	return github.New(opts)
}

type gitlabRow struct{ url, tokenFile, project, envURL *string }

func newGitLabRow(f *flags) forgeRow {
	return &gitlabRow{
		url:       f.String("gitlab-url", "FDN_GITLAB_URL", gitlab.DefaultURL, "the GitLab instance: https://gitlab.com or a self-managed one's URL"),
		tokenFile: f.String("gitlab-token-file", "FDN_GITLAB_TOKEN_FILE", "", "file holding a GitLab token with the api scope: each rollout's verdict is then a GitLab deployment of its commit"),
		project:   f.String("gitlab-project", "FDN_GITLAB_PROJECT", "", "GROUP/PROJECT (subgroups too): the project of rollouts whose source names none"),
		envURL:    f.String("gitlab-environment-url", "FDN_GITLAB_ENVIRONMENT_URL", "", "external_url of the environments made for the clusters"),
	}
}

func (r *gitlabRow) name() string        { return "GitLab" }
func (r *gitlabRow) given() bool         { return *r.tokenFile != "" }
func (r *gitlabRow) credentials() string { return "--gitlab-token-file" }
func (r *gitlabRow) host() string        { return forge.WebHost(*r.url) }
func (r *gitlabRow) defaultRepo() string { return *r.project }

func (r *gitlabRow) check() error {
	if *r.project != "" && !r.given() {
		return errors.New("--gitlab-project needs --gitlab-token-file")
	}
	return checkURL("--gitlab-url", *r.url)
}

func (r *gitlabRow) open(hc *http.Client) (forge.Forge, error) {
	return gitlab.New(gitlab.Options{URL: *r.url, TokenFile: *r.tokenFile, EnvironmentURL: *r.envURL, HTTP: hc})
}

type giteaRow struct{ url, tokenFile, repo *string }

func newGiteaRow(f *flags) forgeRow {
	return &giteaRow{
		url:       f.String("gitea-url", "FDN_GITEA_URL", "", "the Gitea or Forgejo instance's URL"),
		tokenFile: f.String("gitea-token-file", "FDN_GITEA_TOKEN_FILE", "", "file holding a Gitea or Forgejo token with write:repository: each rollout's verdict is then a commit status per cluster"),
		repo:      f.String("gitea-repo", "FDN_GITEA_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none"),
	}
}

func (r *giteaRow) name() string        { return "Gitea" }
func (r *giteaRow) given() bool         { return *r.tokenFile != "" }
func (r *giteaRow) credentials() string { return "--gitea-token-file" }
func (r *giteaRow) host() string        { return forge.WebHost(*r.url) }
func (r *giteaRow) defaultRepo() string { return *r.repo }

func (r *giteaRow) check() error {
	switch {
	case (*r.repo != "" || *r.url != "") && !r.given():
		return errors.New("--gitea-url and --gitea-repo need --gitea-token-file")
	case r.given() && *r.url == "":
		return errors.New("--gitea-token-file needs --gitea-url")
	case r.given():
		return checkURL("--gitea-url", *r.url)
	}
	return nil
}

func (r *giteaRow) open(hc *http.Client) (forge.Forge, error) {
	return gitea.New(gitea.Options{URL: *r.url, TokenFile: *r.tokenFile, HTTP: hc})
}

// checkURL validates a forge's URL flag: http or https, with a host.
func checkURL(flag, s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%s %q: want an http(s) URL", flag, s)
	}
	return nil
}
