// Package api serves what pipelines and operators read: verdicts, the list
// of recent rollouts, health and metrics. It reads the engine's published
// snapshot and never blocks the engine.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Rollouts is the engine's read side.
type Rollouts interface {
	Lookup(q engine.Query) (*rollout.View, error)
	LookupAll(q engine.Query) ([]*rollout.View, error)
	Wait(ctx context.Context, q engine.Query) (*rollout.View, error)
	Get(k rollout.Key) *rollout.View
	Page(q engine.PageQuery) (engine.Page, error)
	Live() map[rollout.Verdict]int
	Stats() *engine.Stats
	CommitFailures() (n int64, last time.Time)
	Ready() bool
	Histories() (map[string]environments.History, error)
	Generation() uint64
}

// MaxWait bounds a long poll on /verdict.
const MaxWait = 5 * time.Minute

// Check is one more condition of readiness, such as the cluster caches
// having synced.
type Check struct {
	Name string
	OK   func() bool
}

// Options are the server's optional parts.
type Options struct {
	// Checks are more conditions of readiness than the engine's.
	Checks []Check
	// Warnings, when set, describe conditions people must know of (the
	// service is blind to Flux events, storing fails, a mail is stuck);
	// none when all is well. They show in /rollouts and /readyz without
	// failing readiness.
	Warnings func() []string
	// Draining, when set, ends when the server shuts down: long polls
	// answer at once instead of holding the shutdown up.
	Draining context.Context
	// Role, when set, names this replica's part among several (leader or
	// follower) in /readyz.
	Role func() string
	// Environments, when set, places clusters in environments for GET
	// /environments; without it each cluster is its own.
	Environments func() Placement
}

// New returns the handlers of what pipelines and operators read; the
// router (internal/server) puts them at their paths and requires the
// verdict token where it applies.
func New(rs Rollouts, log *slog.Logger, opts Options) *Server {
	return &Server{rs: rs, log: log, checks: append([]Check{{Name: "engine", OK: rs.Ready}}, opts.Checks...), warn: opts.Warnings, draining: opts.Draining, role: opts.Role, place: opts.Environments}
}

// Server answers GET /verdict, /commits/{rev}, /rollouts, /healthz and
// /readyz.
type Server struct {
	rs       Rollouts
	log      *slog.Logger
	checks   []Check
	warn     func() []string
	draining context.Context
	role     func() string
	place    func() Placement
	answers  answers
	envs     envCache
}

func (s *Server) warnings() []string {
	if s.warn == nil {
		return []string{}
	}
	return s.warn()
}

// VerdictResponse is the body of GET /verdict with 200: a rollout's view
// plus what only the read side can add. Clients (the wait command) decode
// this type, so the contract has one definition.
type VerdictResponse struct {
	*rollout.View
	SupersededByVerdict *rollout.Verdict `json:"superseded_by_verdict,omitempty"`
}

// RolloutsResponse is the body of GET /rollouts: views, newest first, as
// clients decode them.
type RolloutsResponse struct {
	Rollouts []*rollout.View `json:"rollouts"`
	// Next, when set, is the after of the next page: there may be more.
	Next     string   `json:"next,omitempty"`
	Warnings []string `json:"warnings"`
}

// unknownResponse keeps the verdict shape for a revision never seen, so a
// pipeline can always read .verdict.
type unknownResponse struct {
	Revision     string  `json:"revision"`
	Hash         string  `json:"hash"`
	Cluster      string  `json:"cluster,omitempty"`
	Verdict      string  `json:"verdict"`
	Terminal     bool    `json:"terminal"`
	Summary      string  `json:"summary"`
	FirstSeen    *string `json:"first_seen"`
	CompletedAt  *string `json:"completed_at"`
	SupersededBy *string `json:"superseded_by"`
	Layers       []any   `json:"layers"`
	Failures     []any   `json:"failures"`
}

// Verdict answers GET /verdict.
func (s *Server) Verdict(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	rev := qs.Get("rev")
	if rev == "" {
		edge.Refuse(w, http.StatusBadRequest, "rev", fmt.Sprintf("rev is required: a revision, a 40/64 hex hash or a prefix of %d+ hex digits", flux.MinPrefix))
		return
	}
	hash, prefix, err := flux.ParseQuery(rev)
	if err != nil {
		edge.Refuse(w, http.StatusBadRequest, "rev", err.Error())
		return
	}
	var wait time.Duration
	if ws := qs.Get("wait"); ws != "" {
		if wait, err = time.ParseDuration(ws); err != nil || wait < 0 {
			edge.Refuse(w, http.StatusBadRequest, "wait", "wait must be a duration such as 30s, at most 5m")
			return
		}
		wait = min(wait, MaxWait)
	}
	q := engine.Query{Cluster: qs.Get("cluster"), Hash: hash, Prefix: prefix}
	var v *rollout.View
	if wait > 0 {
		// The server's read and write timeouts are shorter than a long
		// poll; an expiring read deadline would cancel the request's context.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(wait + 10*time.Second))
		_ = rc.SetWriteDeadline(time.Now().Add(wait + 10*time.Second))
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		if s.draining != nil {
			defer context.AfterFunc(s.draining, cancel)()
		}
		v, err = s.rs.Wait(ctx, q)
		cancel()
	} else {
		v, err = s.rs.Lookup(q)
	}
	switch {
	case errors.Is(err, engine.ErrNotFound):
		edge.WriteJSON(w, http.StatusNotFound, unknownResponse{
			Revision: rev, Hash: hash, Cluster: q.Cluster, Verdict: rollout.VerdictUnknown.String(),
			Summary: "no evidence of this revision yet", Layers: []any{}, Failures: []any{},
		})
		return
	case s.lookupFailed(w, err, "look up verdict"):
		return
	}
	s.answers.write(w, http.StatusOK, s.verdictOf(v))
}

// CommitResponse is the body of GET /commits/{rev}: one commit's verdict
// on every cluster that has it, sorted by cluster (none: 404).
type CommitResponse struct {
	Hash     string        `json:"hash"`
	Clusters []verdictJSON `json:"clusters"`
}

// Commit answers GET /commits/{rev}.
func (s *Server) Commit(w http.ResponseWriter, r *http.Request) {
	rev := chi.URLParam(r, "rev")
	hash, prefix, err := flux.ParseQuery(rev)
	if err != nil {
		edge.Refuse(w, http.StatusBadRequest, "rev", err.Error())
		return
	}
	views, err := s.rs.LookupAll(engine.Query{Hash: hash, Prefix: prefix})
	switch {
	case errors.Is(err, engine.ErrNotFound):
		edge.WriteJSON(w, http.StatusNotFound, CommitResponse{Hash: hash, Clusters: []verdictJSON{}})
		return
	case s.lookupFailed(w, err, "look up commit"):
		return
	}
	c := commitAnswer{hash: hash, verdicts: make([]VerdictResponse, len(views))}
	for i, v := range views {
		c.verdicts[i] = s.verdictOf(v)
	}
	s.answers.write(w, http.StatusOK, c)
}

// lookupFailed answers a lookup's error other than not found, 409 for a
// revision that names several rollouts and 500 for the rest, and reports
// whether there was one.
func (s *Server) lookupFailed(w http.ResponseWriter, err error, what string) bool {
	var amb *engine.AmbiguousError
	switch {
	case err == nil:
		return false
	case errors.As(err, &amb):
		edge.WriteError(w, s.log, &edge.Error{Status: http.StatusConflict, Message: amb.Error(), Field: "rev", Matches: amb.Matches})
	default:
		edge.WriteError(w, s.log, fmt.Errorf("%s: %w", what, err))
	}
	return true
}

// verdictOf is v as /verdict answers it.
func (s *Server) verdictOf(v *rollout.View) VerdictResponse {
	resp := VerdictResponse{View: v}
	if v.SupersedeKey != nil {
		if sv := s.rs.Get(*v.SupersedeKey); sv != nil {
			resp.SupersededByVerdict = &sv.Verdict
		}
	}
	return resp
}

// Rollouts answers GET /rollouts.
func (s *Server) Rollouts(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	limit := 50
	if ls := qs.Get("limit"); ls != "" {
		n, err := strconv.Atoi(ls)
		if err != nil || n < 1 || n > 1000 {
			edge.Refuse(w, http.StatusBadRequest, "limit", "limit must be 1 to 1000")
			return
		}
		limit = n
	}
	cluster, source := qs.Get("cluster"), qs.Get("source")
	layers := true
	switch qs.Get("layers") {
	case "", "all":
	case "none":
		layers = false
	default:
		edge.Refuse(w, http.StatusBadRequest, "layers", "layers must be all or none")
		return
	}
	var since time.Time
	if ss := qs.Get("since"); ss != "" {
		var err error
		if since, err = time.Parse(time.RFC3339, ss); err != nil {
			edge.Refuse(w, http.StatusBadRequest, "since", "since must be an RFC 3339 time, such as 2026-12-01T10:00:00Z")
			return
		}
	}
	// A page ends at limit, or where the archive's scan stopped for a
	// filter few match: next goes on from there, until there is none.
	q := engine.PageQuery{Cluster: cluster, Since: since, Limit: limit}
	if a := qs.Get("after"); a != "" {
		c, err := engine.ParseCursor(a)
		if err != nil {
			edge.Refuse(w, http.StatusBadRequest, "after", "after must be the next of a /rollouts answer")
			return
		}
		q.After = &c
	}
	if source != "" {
		q.Keep = func(v *rollout.View) bool { return v.Source.String() == source }
	}
	page, err := s.rs.Page(q)
	if err != nil {
		edge.WriteError(w, s.log, fmt.Errorf("list rollouts: %w", err))
		return
	}
	out := listing{views: page.Views, layers: layers, warnings: s.warnings()}
	if page.Next != nil {
		out.next = page.Next.String()
	}
	s.answers.write(w, http.StatusOK, out)
}

// Healthz answers GET /healthz: the process serves.
func (s *Server) Healthz(w http.ResponseWriter, _ *http.Request) {
	edge.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readyz answers GET /readyz.
func (s *Server) Readyz(w http.ResponseWriter, _ *http.Request) {
	ready, detail := true, map[string]string{}
	for _, c := range s.checks {
		if c.OK() {
			detail[c.Name] = "ok"
		} else {
			ready, detail[c.Name] = false, "not ready"
		}
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "checks": detail, "warnings": s.warnings()}
	if s.role != nil {
		body["role"] = s.role()
	}
	edge.WriteJSON(w, status, body)
}
