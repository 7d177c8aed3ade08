package forge_test

import (
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func TestParseRepoURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/acme/fleet":                 "github.com acme/fleet",
		"https://github.com/acme/fleet.git/":            "github.com acme/fleet",
		"ssh://git@github.com/acme/fleet.git":           "github.com acme/fleet",
		"ssh://git@ghe.example.com:2222/acme/fleet":     "ghe.example.com acme/fleet",
		"git@gitlab.com:acme/platform/fleet.git":        "gitlab.com acme/platform/fleet",
		"https://gitlab.example.com/acme/sub/fleet.git": "gitlab.example.com acme/sub/fleet",
		"https://github.com/acme":                       "",
		"oci://ghcr.io":                                 "",
		"not a url":                                     "",
	} {
		host, r, err := forge.ParseRepoURL(in)
		got := ""
		if err == nil {
			got = host + " " + r.String()
		}
		if got != want {
			t.Errorf("ParseRepoURL(%q) = %q (%v), want %q", in, got, err, want)
		}
	}
	for api, want := range map[string]string{"https://api.github.com": "github.com", "https://ghe.example.com/api/v3": "ghe.example.com", "https://gitlab.com": "gitlab.com"} {
		if got := forge.WebHost(api); got != want {
			t.Errorf("WebHost(%s) = %s, want %s", api, got, want)
		}
	}
}

// A mapping wins over what the source names, which wins over the default;
// a source on another host is not shown, even with a default.
func TestReposOfARollout(t *testing.T) {
	def := forge.Repo{Owner: "acme", Name: "default"}
	urls := map[string]string{
		"GitRepository/flux-system/fleet": "ssh://git@github.com/acme/fleet.git",
		"GitRepository/flux-system/other": "https://gitlab.com/acme/other",
		"OCIRepository/apps/web":          "https://github.com/acme/web",
	}
	rs := &forge.Repos{
		Host: "github.com",
		Map:  map[string]forge.Repo{"flux-system/mapped": {Owner: "acme", Name: "mapped"}, "flux-system/fleet": {Owner: "acme", Name: "fleet-mapped"}},
		URL: func(cluster, kind, ns, name string) (string, bool) {
			if cluster == "staging" && name == "fleet" {
				return "https://github.com/acme/fleet-staging", true
			}
			u, ok := urls[kind+"/"+ns+"/"+name]
			return u, ok
		},
		Default: &def,
	}
	for source, want := range map[string]string{
		"GitRepository/flux-system/fleet":  "acme/fleet-mapped",
		"GitRepository/flux-system/mapped": "acme/mapped",
		"OCIRepository/apps/web":           "acme/web",
		"GitRepository/flux-system/none":   "acme/default",
		"":                                 "acme/default",
		"GitRepository/flux-system/other":  "error: is on gitlab.com, not on github.com",
	} {
		ref, err := rollout.ParseRef(source)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rs.Repo("prod", ref)
		got := r.String()
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasSuffix(got, strings.TrimPrefix(want, "error: ")) || strings.HasPrefix(want, "error") != (err != nil) {
			t.Errorf("Repo(%q) = %q, want %q", source, got, want)
		}
	}
	// A source of the same name on another cluster names its own.
	delete(rs.Map, "flux-system/fleet")
	if r, err := rs.Repo("staging", rollout.Ref{Kind: "GitRepository", Namespace: "flux-system", Name: "fleet"}); err != nil || r.String() != "acme/fleet-staging" {
		t.Errorf("staging's fleet: %v, %v, want the repository its own source names", r, err)
	}
	rs.Default = nil
	if _, err := rs.Repo("prod", rollout.Ref{Kind: "GitRepository", Namespace: "flux-system", Name: "none"}); err == nil || !strings.Contains(err.Error(), "no default") {
		t.Errorf("without a default: %v", err)
	}
}
