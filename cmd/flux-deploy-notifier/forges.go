package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/gitea"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/github"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/gitlab"
)

// forgeTable is every forge the verdicts can be shown on, one row each,
// its flags registered on f: a new forge is its package under
// internal/channel/forge and one row here. The flags are validated here, once,
// and only here: the forge packages know options, not flags.
func forgeTable(f *flags) []*forgeRow {
	return []*forgeRow{githubRow(f), gitlabRow(f), giteaRow(f)}
}

// forgeRow is one forge and its flags, once registered.
type forgeRow struct {
	name        string // as logs and pages say it
	credentials string // the flags that choose it, for errors
	url         *string
	defaultRepo *string // the repository of rollouts whose source names none
	// given reports whether its credentials are given: it then shows the
	// verdicts. check validates its flags once parsed, given or not.
	given func() bool
	check func() error
	open  func(hc *http.Client) (forge.Forge, error)
}

func githubRow(f *flags) *forgeRow {
	apiURL := f.String("github-api-url", "FDN_GITHUB_API_URL", github.DefaultAPIURL, "GitHub's REST API: https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3")
	tokenFile := f.String("github-token-file", "FDN_GITHUB_TOKEN_FILE", "", "file holding a GitHub token that may write deployments: each rollout's verdict is then a deployment of its commit")
	repo := f.String("github-repo", "FDN_GITHUB_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none (with events only, or a source on no forge)")
	envURL := f.String("github-environment-url", "FDN_GITHUB_ENVIRONMENT_URL", "", "environment_url of each deployment status (the deployed application's address)")
	production := f.Bool("github-production-environment", "FDN_GITHUB_PRODUCTION_ENVIRONMENT", false, "mark the deployments' environments as production")
	transient := f.Bool("github-transient-environment", "FDN_GITHUB_TRANSIENT_ENVIRONMENT", false, "mark the deployments' environments as transient (no longer exist once inactive)")
	appID := f.Int("github-app-id", "FDN_GITHUB_APP_ID", 0, "act as this GitHub App (instead of --github-token-file): its installation token, made with its private key, refreshed before it expires")
	installation := f.Int("github-app-installation-id", "FDN_GITHUB_APP_INSTALLATION_ID", 0, "the GitHub App's installation on the repositories")
	appKeyFile := f.String("github-app-private-key-file", "FDN_GITHUB_APP_PRIVATE_KEY_FILE", "", "file holding the GitHub App's private key (PEM)")
	status := f.Bool("github-commit-status", "FDN_GITHUB_COMMIT_STATUS", false, "also post one commit status per cluster (context flux-deploy/<cluster>) with each deployment status")
	given := func() bool { return *tokenFile != "" || *appID != 0 }
	return &forgeRow{
		name: "GitHub", credentials: "--github-token-file (or a GitHub App)", url: apiURL, defaultRepo: repo, given: given,
		check: func() error {
			app := *appID != 0 || *installation != 0 || *appKeyFile != ""
			switch {
			case app && (*appID <= 0 || *installation <= 0 || *appKeyFile == ""):
				return errors.New("a GitHub App needs --github-app-id, --github-app-installation-id and --github-app-private-key-file")
			case app && *tokenFile != "":
				return errors.New("--github-token-file or a GitHub App, not both")
			case *repo != "" && !given():
				return errors.New("--github-repo needs --github-token-file or a GitHub App")
			case strings.Count(*repo, "/") > 1:
				return fmt.Errorf("--github-repo %q: want OWNER/REPO", *repo)
			}
			return checkURL("--github-api-url", *apiURL)
		},
		open: func(hc *http.Client) (forge.Forge, error) {
			opts := github.Options{
				APIURL: *apiURL, TokenFile: *tokenFile, EnvironmentURL: *envURL,
				Production: *production, Transient: *transient, CommitStatus: *status, HTTP: hc,
			}
			if *appID != 0 {
				opts.App = &github.App{ID: int64(*appID), InstallationID: int64(*installation), PrivateKeyFile: *appKeyFile}
			}
			return github.New(opts)
		},
	}
}

func gitlabRow(f *flags) *forgeRow {
	u := f.String("gitlab-url", "FDN_GITLAB_URL", gitlab.DefaultURL, "the GitLab instance: https://gitlab.com or a self-managed one's URL")
	tokenFile := f.String("gitlab-token-file", "FDN_GITLAB_TOKEN_FILE", "", "file holding a GitLab token with the api scope: each rollout's verdict is then a GitLab deployment of its commit")
	project := f.String("gitlab-project", "FDN_GITLAB_PROJECT", "", "GROUP/PROJECT (subgroups too): the project of rollouts whose source names none")
	envURL := f.String("gitlab-environment-url", "FDN_GITLAB_ENVIRONMENT_URL", "", "external_url of the environments made for the clusters")
	given := func() bool { return *tokenFile != "" }
	return &forgeRow{
		name: "GitLab", credentials: "--gitlab-token-file", url: u, defaultRepo: project, given: given,
		check: func() error {
			if *project != "" && !given() {
				return errors.New("--gitlab-project needs --gitlab-token-file")
			}
			return checkURL("--gitlab-url", *u)
		},
		open: func(hc *http.Client) (forge.Forge, error) {
			return gitlab.New(gitlab.Options{URL: *u, TokenFile: *tokenFile, EnvironmentURL: *envURL, HTTP: hc})
		},
	}
}

func giteaRow(f *flags) *forgeRow {
	u := f.String("gitea-url", "FDN_GITEA_URL", "", "the Gitea or Forgejo instance's URL")
	tokenFile := f.String("gitea-token-file", "FDN_GITEA_TOKEN_FILE", "", "file holding a Gitea or Forgejo token with write:repository: each rollout's verdict is then a commit status per cluster")
	repo := f.String("gitea-repo", "FDN_GITEA_REPO", "", "OWNER/REPO: the repository of rollouts whose source names none")
	given := func() bool { return *tokenFile != "" }
	return &forgeRow{
		name: "Gitea", credentials: "--gitea-token-file", url: u, defaultRepo: repo, given: given,
		check: func() error {
			switch {
			case (*repo != "" || *u != "") && !given():
				return errors.New("--gitea-url and --gitea-repo need --gitea-token-file")
			case given() && *u == "":
				return errors.New("--gitea-token-file needs --gitea-url")
			case given():
				return checkURL("--gitea-url", *u)
			}
			return nil
		},
		open: func(hc *http.Client) (forge.Forge, error) {
			return gitea.New(gitea.Options{URL: *u, TokenFile: *tokenFile, HTTP: hc})
		},
	}
}

// checkURL validates a forge's URL flag: http or https, with a host.
func checkURL(flag, s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%s %q: want an http(s) URL", flag, s)
	}
	return nil
}
