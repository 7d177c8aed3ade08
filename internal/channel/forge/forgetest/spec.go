// Package forgetest runs contract servers for the forges that cannot be
// reached from tests: each checks every request, and every answer it
// gives, against the forge's published API description, keeps what it was
// given, and answers as the forge does, its errors included.
package forgetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

// GitHubSpecEnv names the file of GitHub's OpenAPI description when it is
// not bin/github-openapi.json (make installs it there from npm's
// @octokit/openapi).
const GitHubSpecEnv = "FDN_GITHUB_OPENAPI"

// githubPaths are the operations the contract server serves: the rest of
// the 13 MB description is dropped before it is loaded.
var githubPaths = []string{
	"/repos/{owner}/{repo}/deployments",
	"/repos/{owner}/{repo}/deployments/{deployment_id}",
	"/repos/{owner}/{repo}/deployments/{deployment_id}/statuses",
	"/repos/{owner}/{repo}/statuses/{sha}",
	"/app/installations/{installation_id}/access_tokens",
	"/repos/{owner}/{repo}/compare/{basehead}",
}

var githubSpec = sync.OnceValues(func() (*openapi3.T, error) {
	path := os.Getenv(GitHubSpecEnv)
	if path == "" {
		_, file, _, _ := runtime.Caller(0)
		path = filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "bin", "github-openapi.json")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("GitHub's OpenAPI description (make bin/github-openapi.json installs it): %w", err)
	}
	pruned, err := prune(raw, githubPaths)
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(pruned)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("validate %s: %w", path, err)
	}
	return doc, nil
})

// prune keeps the given paths of an OpenAPI document and the components
// they reach through $ref, transitively.
func prune(raw []byte, paths []string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("OpenAPI description: %w", err)
	}
	all, _ := doc["paths"].(map[string]any)
	comps, _ := doc["components"].(map[string]any)
	kept := map[string]any{}
	for _, p := range paths {
		op, ok := all[p]
		if !ok {
			return nil, fmt.Errorf("OpenAPI description has no path %s", p)
		}
		kept[p] = op
	}
	out := map[string]map[string]any{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				if len(parts) == 2 {
					kind, name := parts[0], parts[1]
					if out[kind] == nil {
						out[kind] = map[string]any{}
					}
					if _, seen := out[kind][name]; !seen {
						if byKind, ok := comps[kind].(map[string]any); ok {
							out[kind][name] = byKind[name]
							walk(byKind[name])
						}
					}
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(kept)
	doc["paths"] = kept
	doc["components"] = out
	delete(doc, "webhooks")
	return json.Marshal(doc)
}
