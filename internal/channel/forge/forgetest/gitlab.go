package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GitLab is a contract server for GitLab's deployments and environments
// API (v4) on loopback. GitLab publishes no description of this API that
// a test can load, so it follows GitLab's documentation and its model:
// the token in PRIVATE-TOKEN, the project by its URL-encoded path, the
// parameters each operation requires (400 without them), the deployment
// status machine (running only from created; any other status from any
// but itself: 400 otherwise), X-Next-Page pagination, and the faults a
// test injects. An unexpected request fails the test.
type GitLab struct {
	server
	t        testing.TB
	token    string
	projects map[string]*glProject
	nextID   int64
}

type glProject struct {
	envs        []GitLabEnvironment
	deployments []*GitLabDeployment // oldest first
}

// GitLabEnvironment is an environment the server was given or made.
type GitLabEnvironment struct {
	ID          int64
	Name        string
	ExternalURL string
}

// GitLabDeployment is a deployment the server was given, with every
// status it went through.
type GitLabDeployment struct {
	ID          int64
	Environment string
	Ref, SHA    string
	Tag         bool
	Statuses    []string
	Created     time.Time
}

// StartGitLab starts a contract server that takes token and knows the
// projects named (group/project).
func StartGitLab(t testing.TB, token string, now func() time.Time, projects ...string) *GitLab {
	t.Helper()
	g := &GitLab{server: server{now: now}, t: t, token: token, projects: map[string]*glProject{}, nextID: 500}
	for _, p := range projects {
		g.projects[p] = &glProject{}
	}
	srv := httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// Deployments returns a copy of the project's deployments, oldest first.
func (g *GitLab) Deployments(project string) []GitLabDeployment {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []GitLabDeployment
	for _, d := range g.projects[project].deployments {
		c := *d
		c.Statuses = slices.Clone(d.Statuses)
		out = append(out, c)
	}
	return out
}

// Environments returns the project's environments.
func (g *GitLab) Environments(project string) []GitLabEnvironment {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.projects[project].envs)
}

var glRoute = regexp.MustCompile(`^/api/v4/projects/([^/]+)/(environments|deployments)(?:/(\d+))?$`)

func (g *GitLab) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rec, dropped := g.receive(w, r)
	if dropped {
		return
	}
	m := glRoute.FindStringSubmatch(r.URL.EscapedPath())
	if m == nil {
		g.t.Errorf("contract: %s %s is not an operation this GitLab serves", r.Method, r.URL)
		rec.Answered = g.json(w, http.StatusNotFound, map[string]any{"error": "404 Not Found"})
		return
	}
	if g.fault(w, rec) {
		return
	}
	if r.Header.Get("PRIVATE-TOKEN") != g.token {
		rec.Answered = g.json(w, http.StatusUnauthorized, map[string]any{"message": "401 Unauthorized"})
		return
	}
	path, _ := url.PathUnescape(m[1])
	p := g.projects[path]
	if p == nil {
		rec.Answered = g.json(w, http.StatusNotFound, map[string]any{"message": "404 Project Not Found"})
		return
	}
	params, err := glParams(r)
	if err != nil {
		rec.Answered = g.json(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	switch op := r.Method + " " + m[2] + map[bool]string{true: "/:id"}[m[3] != ""]; op {
	case "GET environments":
		out := []any{}
		for _, e := range p.envs {
			if params["name"] == "" || params["name"] == e.Name {
				out = append(out, glEnvJSON(e))
			}
		}
		rec.Answered = g.json(w, http.StatusOK, out)
	case "POST environments":
		if params["name"] == "" {
			rec.Answered = g.json(w, http.StatusBadRequest, map[string]any{"error": "name is missing"})
			return
		}
		for _, e := range p.envs {
			if e.Name == params["name"] {
				rec.Answered = g.json(w, http.StatusBadRequest, map[string]any{"message": map[string]any{"name": []string{"has already been taken"}}})
				return
			}
		}
		e := GitLabEnvironment{ID: g.id(), Name: params["name"], ExternalURL: params["external_url"]}
		p.envs = append(p.envs, e)
		rec.Answered = g.json(w, http.StatusCreated, glEnvJSON(e))
	case "GET deployments":
		rec.Answered = g.list(w, r, p, params)
	case "POST deployments":
		rec.Answered = g.create(w, p, params)
	case "GET deployments/:id", "PUT deployments/:id":
		var d *GitLabDeployment
		for _, x := range p.deployments {
			if strconv.FormatInt(x.ID, 10) == m[3] {
				d = x
			}
		}
		if d == nil {
			rec.Answered = g.json(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
			return
		}
		if r.Method == http.MethodPut {
			if msg := glTransition(d, params["status"]); msg != "" {
				rec.Answered = g.json(w, http.StatusBadRequest, map[string]any{"message": msg})
				return
			}
		}
		rec.Answered = g.json(w, http.StatusOK, glDeploymentJSON(d))
	default:
		g.t.Errorf("contract: %s %s is not an operation this GitLab serves", r.Method, r.URL)
		rec.Answered = g.json(w, http.StatusMethodNotAllowed, map[string]any{"error": "405 Method Not Allowed"})
	}
}

func (g *GitLab) list(w http.ResponseWriter, r *http.Request, p *glProject, params map[string]string) int {
	match := slices.Clone(p.deployments)
	match = slices.DeleteFunc(match, func(d *GitLabDeployment) bool {
		return params["environment"] != "" && d.Environment != params["environment"] ||
			params["status"] != "" && d.Statuses[len(d.Statuses)-1] != params["status"]
	})
	if params["sort"] != "asc" { // GitLab's default order is by id, ascending; the client asks desc
		slices.Reverse(match)
	}
	if params["order_by"] != "" && params["order_by"] != "id" {
		g.t.Errorf("contract: deployments ordered by %q", params["order_by"])
	}
	per, page := atoiOr(params["per_page"], 20), atoiOr(params["page"], 1)
	if per > 100 {
		per = 100
	}
	lo, hi := min((page-1)*per, len(match)), min(page*per, len(match))
	h := http.Header{"X-Page": {strconv.Itoa(page)}, "X-Per-Page": {strconv.Itoa(per)}, "X-Total": {strconv.Itoa(len(match))}}
	if hi < len(match) {
		h.Set("X-Next-Page", strconv.Itoa(page+1))
		next := *r.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(page+1))
		next.RawQuery = q.Encode()
		h.Set("Link", fmt.Sprintf("<%s%s>; rel=\"next\"", g.URL, next.RequestURI()))
	}
	out := []any{}
	for _, d := range match[lo:hi] {
		out = append(out, glDeploymentJSON(d))
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	return g.json(w, http.StatusOK, out)
}

func (g *GitLab) create(w http.ResponseWriter, p *glProject, params map[string]string) int {
	for _, k := range []string{"environment", "sha", "ref", "tag", "status"} {
		if params[k] == "" {
			return g.json(w, http.StatusBadRequest, map[string]any{"error": k + " is missing"})
		}
	}
	if !slices.Contains([]string{"running", "success", "failed", "canceled"}, params["status"]) {
		return g.json(w, http.StatusBadRequest, map[string]any{"error": "status does not have a valid value"})
	}
	if !(&repo{}).known(params["sha"]) {
		return g.json(w, http.StatusBadRequest, map[string]any{"message": "The SHA " + params["sha"] + " was not found"})
	}
	if !slices.ContainsFunc(p.envs, func(e GitLabEnvironment) bool { return e.Name == params["environment"] }) {
		p.envs = append(p.envs, GitLabEnvironment{ID: g.id(), Name: params["environment"]})
	}
	d := &GitLabDeployment{ID: g.id(), Environment: params["environment"], Ref: params["ref"], SHA: params["sha"],
		Tag: params["tag"] == "true", Statuses: []string{params["status"]}, Created: g.now().UTC()}
	p.deployments = append(p.deployments, d)
	return g.json(w, http.StatusCreated, glDeploymentJSON(d))
}

// glTransition applies GitLab's deployment status machine, or says why
// not (GitLab's message).
func glTransition(d *GitLabDeployment, to string) string {
	from := d.Statuses[len(d.Statuses)-1]
	ok := false
	switch to {
	case "running":
		ok = from == "created"
	case "success", "failed", "canceled":
		ok = from != to
	default:
		return "status does not have a valid value"
	}
	if !ok {
		return fmt.Sprintf("Cannot transition status via :%s from :%s", map[string]string{"running": "run", "success": "succeed", "failed": "drop", "canceled": "cancel"}[to], from)
	}
	d.Statuses = append(d.Statuses, to)
	return ""
}

// glParams reads an operation's parameters: the query string, and a JSON
// or form body.
func glParams(r *http.Request) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range r.URL.Query() {
		out[k] = v[0]
	}
	if r.Body == nil || r.Method == http.MethodGet {
		return out, nil
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, fmt.Errorf("body is not valid JSON: %v", err)
		}
		for k, v := range body {
			out[k] = fmt.Sprint(v)
		}
		return out, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, err
	}
	for k, v := range r.PostForm {
		out[k] = v[0]
	}
	return out, nil
}

func (g *GitLab) json(w http.ResponseWriter, status int, v any) int {
	body, err := json.Marshal(v)
	if err != nil {
		g.t.Errorf("contract: encode the answer: %v", err)
	}
	return raw(w, status, http.Header{"Content-Type": {"application/json"}}, string(body))
}

func (g *GitLab) id() int64 {
	g.nextID++
	return g.nextID
}

func glEnvJSON(e GitLabEnvironment) map[string]any {
	return map[string]any{"id": e.ID, "name": e.Name, "slug": e.Name, "external_url": e.ExternalURL, "state": "available", "tier": "other"}
}

func glDeploymentJSON(d *GitLabDeployment) map[string]any {
	at := d.Created.Format(time.RFC3339)
	return map[string]any{"id": d.ID, "iid": d.ID, "ref": d.Ref, "sha": d.SHA, "status": d.Statuses[len(d.Statuses)-1],
		"created_at": at, "updated_at": at, "user": map[string]any{"id": 1, "username": "flux-deployer", "name": "Flux"},
		"environment": map[string]any{"name": d.Environment}, "deployable": nil}
}
