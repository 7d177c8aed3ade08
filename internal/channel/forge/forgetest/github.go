package forgetest

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// GitHub is a contract server for GitHub's deployments API on loopback.
// Each request and each answer is checked against GitHub's OpenAPI
// description (a mismatch fails the test); it keeps the deployments and
// statuses it was given and answers as GitHub does: 401 without the token,
// 404 for an unknown repository or deployment, 422 for a description over
// 140 characters or an unknown commit, and whatever faults the test
// injects.
type GitHub struct {
	server
	t      testing.TB
	router routers.Router

	token   string
	repos   map[string]*repo
	nextID  int64
	created func(Deployment)
	apps    map[int64]app        // by installation
	issued  map[string]time.Time // installation tokens, until they expire
}

// app is a GitHub App installed: its id and public key.
type app struct {
	id  int64
	key *rsa.PublicKey
}

// AddApp installs a GitHub App (id, public key) as installation: a JWT it
// signs gets installation tokens, valid an hour, that the API takes.
func (g *GitHub) AddApp(id, installation int64, key *rsa.PublicKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.apps[installation] = app{id, key}
}

// AfterCreate sets a function called with each deployment made, before
// the answer is written (a test kills the client there).
func (g *GitHub) AfterCreate(f func(Deployment)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.created = f
}

type repo struct {
	commits     map[string]bool // empty: any 40-hex commit exists
	history     []string        // AddCommits', oldest first: what compare reads
	deployments []*Deployment   // oldest first
	statuses    []CommitStatus  // oldest first
}

// CommitStatus is one commit status the server was given.
type CommitStatus struct {
	ID                                    int64
	SHA, State, Context, Description, URL string
}

// Deployment is one deployment the server was given.
type Deployment struct {
	ID               int64
	SHA, Ref, Task   string
	Environment      string
	Description      string
	Payload          any
	AutoMerge        *bool
	RequiredContexts *[]string
	Transient        bool
	Production       bool
	Created          time.Time
	Statuses         []Status // oldest first
}

// Status is one deployment status the server was given.
type Status struct {
	ID             int64
	State          string
	Description    string
	Environment    string
	LogURL         string
	EnvironmentURL string
	AutoInactive   *bool
	Created        time.Time
}

// StartGitHub starts a contract server that takes token and knows the
// repositories named (OWNER/NAME); now is its clock (Retry-After and rate
// limit resets are read against the client's).
func StartGitHub(t testing.TB, token string, now func() time.Time, repos ...string) *GitHub {
	t.Helper()
	doc, err := githubSpec()
	if err != nil {
		t.Fatal(err)
	}
	g := &GitHub{server: server{now: now}, t: t, token: token, repos: map[string]*repo{}, nextID: 1000,
		apps: map[int64]app{}, issued: map[string]time.Time{}}
	for _, r := range repos {
		g.repos[r] = &repo{commits: map[string]bool{}}
	}
	srv := httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	d := *doc
	d.Servers = openapi3.Servers{{URL: srv.URL}}
	if g.router, err = gorillamux.NewRouter(&d); err != nil {
		t.Fatal(err)
	}
	return g
}

// AddCommits makes the repository know only these commits (others are
// refused with 422, as GitHub refuses a ref it does not have), each the
// child of the one before: a linear history compare reads.
func (g *GitHub) AddCommits(repo string, shas ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range shas {
		g.repos[repo].commits[s] = true
		g.repos[repo].history = append(g.repos[repo].history, s)
	}
}

// Deployments returns a copy of the repository's deployments, oldest first.
func (g *GitHub) Deployments(repo string) []Deployment {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Deployment
	for _, d := range g.repos[repo].deployments {
		c := *d
		c.Statuses = slices.Clone(d.Statuses)
		out = append(out, c)
	}
	return out
}

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	rec, dropped := g.receive(w, r)
	if dropped {
		return
	}
	route, params, err := g.router.FindRoute(r)
	if err != nil {
		g.t.Errorf("contract: %s %s is not an operation of GitHub's API: %v", r.Method, r.URL, err)
		rec.Answered = g.answer(w, nil, http.StatusNotFound, nil, basicError("Not Found"))
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: r.Clone(r.Context()), PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		g.t.Errorf("contract: request %s %s breaks GitHub's API description: %v", r.Method, r.URL, err)
		rec.Answered = g.answer(w, in, http.StatusUnprocessableEntity, nil, validationError("Invalid request.", err.Error()))
		return
	}
	if g.fault(w, rec) {
		return
	}
	if route.Operation.OperationID == "apps/create-installation-access-token" {
		rec.Answered = g.installationToken(w, in, params["installation_id"], r.Header.Get("Authorization"))
		return
	}
	if !g.authorized(r.Header.Get("Authorization")) {
		rec.Answered = g.answer(w, in, http.StatusUnauthorized, nil, basicError("Bad credentials"))
		return
	}
	rp := g.repos[params["owner"]+"/"+params["repo"]]
	if rp == nil {
		rec.Answered = g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
		return
	}
	base := g.URL + "/repos/" + params["owner"] + "/" + params["repo"]
	switch route.Operation.OperationID {
	case "repos/list-deployments":
		rec.Answered = g.list(w, in, rp, base, r)
	case "repos/create-deployment":
		rec.Answered = g.create(w, in, rp, base, body)
	case "repos/create-deployment-status":
		rec.Answered = g.createStatus(w, in, rp, base, params["deployment_id"], body)
	case "repos/compare-commits-with-basehead":
		rec.Answered = g.compare(w, in, rp, base, params["basehead"], r)
	case "repos/create-commit-status":
		rec.Answered = g.createCommitStatus(w, in, rp, base, params["sha"], body)
	case "repos/list-deployment-statuses":
		d := g.find(rp, params["deployment_id"])
		if d == nil {
			rec.Answered = g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
			return
		}
		out := []any{}
		for i := len(d.Statuses) - 1; i >= 0; i-- {
			out = append(out, statusJSON(base, d, d.Statuses[i]))
		}
		rec.Answered = g.answer(w, in, http.StatusOK, nil, out)
	default:
		g.t.Errorf("contract: %s %s (%s) is not served here", r.Method, r.URL, route.Operation.OperationID)
		rec.Answered = g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
	}
}

// authorized: the token, or an installation token not expired.
func (g *GitHub) authorized(auth string) bool {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(auth, "token ")
	}
	if !ok {
		return false
	}
	exp, issued := g.issued[tok]
	return tok == g.token || issued && g.now().Before(exp)
}

// installationToken checks an App's JWT (RS256 with the App's key, issued
// by its id, at most ten minutes long, not expired) and issues a token.
func (g *GitHub) installationToken(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, installation, auth string) int {
	id, _ := strconv.ParseInt(installation, 10, 64)
	a, ok := g.apps[id]
	if !ok {
		return g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
	}
	jwt, _ := strings.CutPrefix(auth, "Bearer ")
	parts := strings.Split(jwt, ".")
	bad := func(msg string) int { return g.answer(w, in, http.StatusUnauthorized, nil, basicError(msg)) }
	if len(parts) != 3 {
		return bad("A JSON web token could not be decoded")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err != nil || rsa.VerifyPKCS1v15(a.key, crypto.SHA256, sum[:], sig) != nil {
		return bad("A JSON web token could not be decoded")
	}
	var claims struct {
		Iat, Exp int64
		Iss      any
	}
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if json.Unmarshal(raw, &claims) != nil || fmt.Sprint(claims.Iss) != strconv.FormatInt(a.id, 10) {
		return bad("Integration not found")
	}
	now := g.now().Unix()
	if claims.Exp <= now || claims.Iat > now+60 || claims.Exp-claims.Iat > 600 {
		return bad("'Expiration time' claim ('exp') is too far in the future or has passed")
	}
	tok := fmt.Sprintf("ghs_installation_%d", g.id())
	exp := g.now().Add(time.Hour).UTC().Truncate(time.Second)
	g.issued[tok] = exp
	return g.answer(w, in, http.StatusCreated, nil, map[string]any{"token": tok, "expires_at": exp.Format(time.RFC3339),
		"permissions": map[string]any{"deployments": "write", "statuses": "write"}, "repository_selection": "all"})
}

// Installations counts the installation tokens issued.
func (g *GitHub) Installations() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.issued)
}

func (g *GitHub) list(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, rp *repo, base string, r *http.Request) int {
	q := r.URL.Query()
	var match []*Deployment
	for i := len(rp.deployments) - 1; i >= 0; i-- { // newest first
		d := rp.deployments[i]
		if (q.Get("sha") == "" || q.Get("sha") == d.SHA) && (q.Get("ref") == "" || q.Get("ref") == d.Ref) &&
			(q.Get("environment") == "" || q.Get("environment") == d.Environment) && (q.Get("task") == "" || q.Get("task") == d.Task) {
			match = append(match, d)
		}
	}
	per, page := atoiOr(q.Get("per_page"), 30), atoiOr(q.Get("page"), 1)
	lo, hi := min((page-1)*per, len(match)), min(page*per, len(match))
	h := http.Header{}
	if hi < len(match) {
		next := *r.URL
		qq := next.Query()
		qq.Set("page", strconv.Itoa(page+1))
		next.RawQuery = qq.Encode()
		h.Set("Link", fmt.Sprintf("<%s%s>; rel=\"next\"", g.URL, next.RequestURI()))
	}
	out := []any{}
	for _, d := range match[lo:hi] {
		out = append(out, deploymentJSON(base, d))
	}
	return g.answer(w, in, http.StatusOK, h, out)
}

func (g *GitHub) create(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, rp *repo, base string, body []byte) int {
	var req struct {
		Ref                   string    `json:"ref"`
		Task                  *string   `json:"task"`
		AutoMerge             *bool     `json:"auto_merge"`
		RequiredContexts      *[]string `json:"required_contexts"`
		Payload               any       `json:"payload"`
		Environment           *string   `json:"environment"`
		Description           *string   `json:"description"`
		TransientEnvironment  bool      `json:"transient_environment"`
		ProductionEnvironment *bool     `json:"production_environment"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return g.answer(w, in, http.StatusBadRequest, nil, basicError("Problems parsing JSON"))
	}
	if !rp.known(req.Ref) {
		return g.answer(w, in, http.StatusUnprocessableEntity, nil, validationError("No ref found for: "+req.Ref, ""))
	}
	d := &Deployment{ID: g.id(), SHA: req.Ref, Ref: req.Ref, Task: deref(req.Task, "deploy"), Environment: deref(req.Environment, "production"),
		Description: deref(req.Description, ""), Payload: req.Payload, AutoMerge: req.AutoMerge, RequiredContexts: req.RequiredContexts,
		Transient: req.TransientEnvironment, Created: g.now().UTC().Truncate(time.Second)}
	d.Production = d.Environment == "production"
	if req.ProductionEnvironment != nil {
		d.Production = *req.ProductionEnvironment
	}
	if d.Payload == nil {
		d.Payload = map[string]any{}
	}
	rp.deployments = append(rp.deployments, d)
	if g.created != nil {
		g.created(*d)
	}
	return g.answer(w, in, http.StatusCreated, nil, deploymentJSON(base, d))
}

func (g *GitHub) createStatus(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, rp *repo, base, id string, body []byte) int {
	d := g.find(rp, id)
	if d == nil {
		return g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
	}
	var req struct {
		State          string  `json:"state"`
		LogURL         string  `json:"log_url"`
		TargetURL      string  `json:"target_url"`
		Description    string  `json:"description"`
		Environment    *string `json:"environment"`
		EnvironmentURL string  `json:"environment_url"`
		AutoInactive   *bool   `json:"auto_inactive"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return g.answer(w, in, http.StatusBadRequest, nil, basicError("Problems parsing JSON"))
	}
	if n := utf8.RuneCountInString(req.Description); n > 140 {
		return g.answer(w, in, http.StatusUnprocessableEntity, nil,
			validationError("Validation Failed", fmt.Sprintf("description is too long (maximum is 140 characters, was %d)", n)))
	}
	st := Status{ID: g.id(), State: req.State, Description: req.Description, LogURL: req.LogURL, EnvironmentURL: req.EnvironmentURL,
		AutoInactive: req.AutoInactive, Environment: d.Environment, Created: g.now().UTC().Truncate(time.Second)}
	if st.LogURL == "" {
		st.LogURL = req.TargetURL
	}
	if req.Environment != nil {
		st.Environment = *req.Environment
	}
	d.Statuses = append(d.Statuses, st)
	if st.State == "success" && (req.AutoInactive == nil || *req.AutoInactive) {
		// GitHub marks the environment's earlier deployments inactive.
		for _, o := range rp.deployments {
			if o != d && o.Environment == d.Environment && len(o.Statuses) > 0 && o.Statuses[len(o.Statuses)-1].State != "inactive" {
				o.Statuses = append(o.Statuses, Status{ID: g.id(), State: "inactive", Environment: o.Environment, Created: st.Created})
			}
		}
	}
	return g.answer(w, in, http.StatusCreated, nil, statusJSON(base, d, st))
}

func (g *GitHub) createCommitStatus(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, rp *repo, base, sha string, body []byte) int {
	var req struct {
		State       string  `json:"state"`
		TargetURL   *string `json:"target_url"`
		Description *string `json:"description"`
		Context     *string `json:"context"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return g.answer(w, in, http.StatusBadRequest, nil, basicError("Problems parsing JSON"))
	}
	if !rp.known(sha) {
		return g.answer(w, in, http.StatusUnprocessableEntity, nil, validationError("No commit found for SHA: "+sha, ""))
	}
	if n := utf8.RuneCountInString(deref(req.Description, "")); n > 140 {
		return g.answer(w, in, http.StatusUnprocessableEntity, nil, validationError("Validation Failed", "description is too long (maximum is 140 characters)"))
	}
	st := CommitStatus{ID: g.id(), SHA: sha, State: req.State, Context: deref(req.Context, "default"), Description: deref(req.Description, ""), URL: deref(req.TargetURL, "")}
	rp.statuses = append(rp.statuses, st)
	at := g.now().UTC().Format(time.RFC3339)
	return g.answer(w, in, http.StatusCreated, nil, map[string]any{
		"url": base + "/statuses/" + sha, "avatar_url": nil, "id": st.ID, "node_id": fmt.Sprintf("SC_%d", st.ID), "state": st.State,
		"description": st.Description, "target_url": st.URL, "context": st.Context, "created_at": at, "updated_at": at, "creator": user(),
	})
}

// compare answers base...head over the linear history: the commits after
// base up to head, oldest first, a page of them.
func (g *GitHub) compare(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, rp *repo, base, basehead string, r *http.Request) int {
	b, h, ok := strings.Cut(basehead, "...")
	bi, hi := slices.Index(rp.history, b), slices.Index(rp.history, h)
	if !ok || bi < 0 || hi < 0 {
		return g.answer(w, in, http.StatusNotFound, nil, basicError("Not Found"))
	}
	status, commits := "identical", []string{}
	switch {
	case hi > bi:
		status, commits = "ahead", rp.history[bi+1:hi+1]
	case hi < bi:
		status = "behind"
	}
	q := r.URL.Query()
	per, page := atoiOr(q.Get("per_page"), 250), atoiOr(q.Get("page"), 1)
	lo, up := min((page-1)*per, len(commits)), min(page*per, len(commits))
	list := []any{}
	for i, c := range commits[lo:up] {
		list = append(list, commitJSON(base, c, rp.history[bi+lo+i]))
	}
	return g.answer(w, in, http.StatusOK, nil, map[string]any{
		"url": base + "/compare/" + basehead, "html_url": "https://github.com/compare/" + basehead, "permalink_url": "https://github.com/compare/" + basehead,
		"diff_url": "https://github.com/compare/" + basehead + ".diff", "patch_url": "https://github.com/compare/" + basehead + ".patch",
		"base_commit": commitJSON(base, b, ""), "merge_base_commit": commitJSON(base, b, ""), "status": status,
		"ahead_by": len(commits), "behind_by": max(bi-hi, 0), "total_commits": len(commits), "commits": list,
	})
}

func commitJSON(base, sha, parent string) map[string]any {
	parents := []any{}
	if parent != "" {
		parents = append(parents, map[string]any{"sha": parent, "url": base + "/commits/" + parent})
	}
	who := map[string]any{"name": "Dev", "email": "dev@example.com", "date": "2026-12-05T10:00:00Z"}
	return map[string]any{
		"url": base + "/commits/" + sha, "sha": sha, "node_id": "C_" + sha[:8], "html_url": "https://github.com/commit/" + sha,
		"comments_url": base + "/commits/" + sha + "/comments", "author": user(), "committer": user(), "parents": parents,
		"commit": map[string]any{"author": who, "committer": who, "comment_count": 0, "message": "Change " + sha[:7],
			"tree": map[string]any{"sha": sha, "url": base + "/git/trees/" + sha}, "url": base + "/git/commits/" + sha},
	}
}

// CommitStatuses returns a copy of the repository's commit statuses,
// oldest first.
func (g *GitHub) CommitStatuses(repo string) []CommitStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repos[repo].statuses)
}

func (rp *repo) known(sha string) bool {
	if len(rp.commits) > 0 {
		return rp.commits[sha]
	}
	if len(sha) != 40 {
		return false
	}
	for _, c := range sha {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func (g *GitHub) find(rp *repo, id string) *Deployment {
	for _, d := range rp.deployments {
		if strconv.FormatInt(d.ID, 10) == id {
			return d
		}
	}
	return nil
}

func (g *GitHub) id() int64 {
	g.nextID++
	return g.nextID
}

// answer writes a JSON answer after checking it against the operation's
// responses in the description: the server must answer as GitHub would.
func (g *GitHub) answer(w http.ResponseWriter, in *openapi3filter.RequestValidationInput, status int, h http.Header, v any) int {
	body, err := json.Marshal(v)
	if err != nil {
		g.t.Errorf("contract: encode the answer: %v", err)
	}
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	if in != nil && status < 500 {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: h,
			Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(in.Request.Context(), out); err != nil && !undocumented(status) {
			g.t.Errorf("contract: the server's own %d answer to %s %s breaks GitHub's API description: %v", status, in.Request.Method, in.Request.URL, err)
		}
	}
	return raw(w, status, h, string(body))
}

// undocumented: statuses GitHub answers on every operation without its
// description listing them (authentication, a missing repository).
func undocumented(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusNotFound || status == http.StatusBadRequest
}

func basicError(msg string) map[string]any {
	return map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest", "status": ""}
}

func validationError(msg, detail string) map[string]any {
	e := map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"}
	if detail != "" {
		e["errors"] = []any{map[string]any{"resource": "DeploymentStatus", "code": "custom", "message": detail}}
	}
	return e
}

func deploymentJSON(base string, d *Deployment) map[string]any {
	url := fmt.Sprintf("%s/deployments/%d", base, d.ID)
	return map[string]any{
		"url": url, "id": d.ID, "node_id": fmt.Sprintf("DE_%d", d.ID), "sha": d.SHA, "ref": d.Ref, "task": d.Task,
		"payload": d.Payload, "original_environment": d.Environment, "environment": d.Environment, "description": d.Description,
		"creator": user(), "created_at": d.Created.Format(time.RFC3339), "updated_at": d.Created.Format(time.RFC3339),
		"statuses_url": url + "/statuses", "repository_url": base,
		"transient_environment": d.Transient, "production_environment": d.Production,
	}
}

func statusJSON(base string, d *Deployment, s Status) map[string]any {
	url := fmt.Sprintf("%s/deployments/%d", base, d.ID)
	return map[string]any{
		"url": fmt.Sprintf("%s/statuses/%d", url, s.ID), "id": s.ID, "node_id": fmt.Sprintf("DES_%d", s.ID), "state": s.State,
		"creator": user(), "description": s.Description, "environment": s.Environment, "target_url": s.LogURL, "log_url": s.LogURL,
		"environment_url": s.EnvironmentURL, "created_at": s.Created.Format(time.RFC3339), "updated_at": s.Created.Format(time.RFC3339),
		"deployment_url": url, "repository_url": base,
	}
}

func user() map[string]any {
	const u = "https://api.github.com/users/flux-deployer"
	return map[string]any{
		"login": "flux-deployer", "id": 1, "node_id": "U_1", "avatar_url": "https://avatars.githubusercontent.com/u/1",
		"gravatar_id": "", "url": u, "html_url": "https://github.com/flux-deployer", "followers_url": u + "/followers",
		"following_url": u + "/following{/other_user}", "gists_url": u + "/gists{/gist_id}", "starred_url": u + "/starred{/owner}{/repo}",
		"subscriptions_url": u + "/subscriptions", "organizations_url": u + "/orgs", "repos_url": u + "/repos",
		"events_url": u + "/events{/privacy}", "received_events_url": u + "/received_events", "type": "Bot", "site_admin": false,
	}
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return n
	}
	return def
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
