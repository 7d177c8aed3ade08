package forge

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Repos finds the repository of a rollout's commits on one forge: an
// explicit mapping of its source first, then what its source names (a
// GitRepository's URL, an OCI artifact's org.opencontainers.image.source,
// read from the cluster), then Default.
type Repos struct {
	// Host is the forge's own host (github.com for api.github.com): a
	// source on another host is not this forge's to show.
	Host string
	// Map takes a source's namespace/name to its repository.
	Map map[string]Repo
	// URL returns the URL a source of a cluster names, when that cluster
	// is read: sources of one name differ from cluster to cluster.
	URL func(cluster, kind, namespace, name string) (string, bool)
	// Default is the repository of rollouts whose source names none
	// (events only, or no source known): nil, none.
	Default *Repo
}

// Repo is the repository of the commits of src on cluster (zero: none
// known), or why there is none.
func (rs *Repos) Repo(cluster string, src rollout.Ref) (Repo, error) {
	if r, ok := rs.Map[src.Namespace+"/"+src.Name]; ok && src != (rollout.Ref{}) {
		return r, nil
	}
	if src != (rollout.Ref{}) && rs.URL != nil {
		if raw, ok := rs.URL(cluster, src.Kind, src.Namespace, src.Name); ok && raw != "" {
			host, r, err := ParseRepoURL(raw)
			switch {
			case err != nil:
				return Repo{}, fmt.Errorf("%s names %q: %w", src, raw, err)
			case !strings.EqualFold(host, rs.Host):
				return Repo{}, fmt.Errorf("%s is on %s, not on %s", src, host, rs.Host)
			}
			return r, nil
		}
	}
	if rs.Default != nil {
		return *rs.Default, nil
	}
	if src == (rollout.Ref{}) {
		return Repo{}, errors.New("no source known for the rollout and no default repository")
	}
	return Repo{}, fmt.Errorf("%s names no repository and there is no default one", src)
}

// ParseRepoURL reads the host and repository of a git URL as Flux takes
// them: https://host/owner/name(.git), ssh://git@host(:port)/owner/name,
// and the scp form git@host:owner/name. A GitLab group path keeps its
// subgroups in Owner.
func ParseRepoURL(raw string) (host string, r Repo, err error) {
	s := strings.TrimSpace(raw)
	if at, ok := strings.CutPrefix(s, "git@"); ok && !strings.Contains(s, "://") {
		h, path, ok := strings.Cut(at, ":")
		if !ok {
			return "", Repo{}, errors.New("not a repository URL")
		}
		s = "ssh://git@" + h + "/" + path
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" {
		return "", Repo{}, errors.New("not a repository URL")
	}
	path := strings.TrimSuffix(strings.Trim(u.Path, "/"), ".git")
	r, err = ParseRepo(path)
	if err != nil {
		return "", Repo{}, errors.New("not a repository URL")
	}
	return u.Hostname(), r, nil
}

// WebHost is the web host of a forge's API URL: api.github.com's is
// github.com; a GitHub Enterprise Server's (https://HOST/api/v3) or
// GitLab's is its own host.
func WebHost(apiURL string) string {
	u, err := url.Parse(apiURL)
	if err != nil {
		return ""
	}
	if h := u.Hostname(); h != "api.github.com" {
		return h
	}
	return "github.com"
}
