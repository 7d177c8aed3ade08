package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
)

// forgeConfig is the forge part of serve's configuration: the forge whose
// credentials are given (one at a time, a row of forgeTable) shows the
// verdicts.
type forgeConfig struct {
	rows       []*forgeRow
	repoMap    *string
	envMap     *string
	alertAfter *time.Duration

	chosen *forgeRow // nil: no forge
	repos  forge.Repos
	envs   map[string]string
}

func (c *forgeConfig) flags(f *flags) {
	c.rows = forgeTable(f)
	c.repoMap = f.String("forge-repos", "FDN_FORGE_REPOS", "", "sources' repositories, over what the sources name: namespace/name=OWNER/REPO,...")
	c.envMap = f.String("forge-environments", "FDN_FORGE_ENVIRONMENTS", "", "the forge's environment of a cluster, when not the cluster's name: cluster=environment,...")
	c.alertAfter = f.Duration("forge-alert-after", "FDN_FORGE_ALERT_AFTER", 15*time.Minute, "a verdict the forge has not taken for longer is reported: a /readyz warning")
}

// enabled reports whether a forge shows the verdicts.
func (c *forgeConfig) enabled() bool { return c.chosen != nil }

// name is the chosen forge's, "" when none.
func (c *forgeConfig) name() string {
	if c.chosen == nil {
		return ""
	}
	return c.chosen.name
}

// finish validates the forge flags once parsed: each row's own, one forge
// at most, the repositories and environments.
func (c *forgeConfig) finish() error {
	var given []string
	for _, r := range c.rows {
		if err := r.check(); err != nil {
			return err
		}
		if r.given() {
			c.chosen = r
			given = append(given, r.credentials)
		}
	}
	switch {
	case len(given) > 1:
		return fmt.Errorf("%s: one forge shows the verdicts, not two", strings.Join(given, ", "))
	case (*c.repoMap != "" || *c.envMap != "") && !c.enabled():
		return errors.New("--forge-repos and --forge-environments need a forge's token file")
	}
	if c.chosen != nil {
		var def string
		c.repos.Host, def = forge.WebHost(*c.chosen.url), *c.chosen.defaultRepo
		if def != "" {
			r, err := forge.ParseRepo(def)
			if err != nil {
				return fmt.Errorf("the %s repository: %w", c.chosen.name, err)
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
	var err error
	if c.envs, err = pairs("--forge-environments", *c.envMap, "cluster=environment"); err != nil {
		return err
	}
	if *c.alertAfter <= 0 {
		return fmt.Errorf("--forge-alert-after must be positive, got %s", *c.alertAfter)
	}
	return nil
}

// deliverer makes the chosen forge's Deliverer; env's links give each
// status the rollout's page, and its sourceURL reads what a source names
// from the cluster.
func (c *forgeConfig) deliverer(env channelEnv) (outbox.Deliverer, error) {
	f, err := c.chosen.open(env.hc)
	if err != nil {
		return nil, err
	}
	c.repos.URL = env.sourceURL
	// Each status links the rollout's page, as a chat message does.
	cfg := forge.Config{Repo: c.repos.Repo, LogURL: env.links.Page, AlertAfter: *c.alertAfter, Environments: c.envs}
	def := "none"
	if c.repos.Default != nil {
		def = c.repos.Default.String()
	}
	env.log.Info("verdicts shown as deployments", "forge", f.Name(), "host", c.repos.Host, "default_repo", def, "mapped_sources", len(c.repos.Map))
	return forge.NewDeliverer(env.db, f, cfg, env.log), nil
}
