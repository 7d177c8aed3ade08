// Package server is the service's HTTP edge put together: the one router,
// which puts each handler at its path behind the authentication it needs,
// and the HTTP server with its timeouts.
package server

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
)

// Parts are the handlers the router serves.
type Parts struct {
	// Webhook receives Flux events at POST /webhook; it checks their HMAC
	// or bearer token itself, over the body it reads.
	Webhook http.Handler
	// API answers what pipelines and operators read.
	API *api.Server
	// Verdicts, when set, is required of /verdict, /commits, /rollouts and
	// /environments:
	// the verdict token as a bearer token (a status page session works
	// too). No proxy header is trusted there: pipelines reach them directly.
	Verdicts *edge.Auth
	// UI, when set, serves the status pages under /ui/ (they authenticate
	// themselves, with the same check and a login form); / leads there.
	UI http.Handler
	// Metrics serves GET /metrics.
	Metrics http.Handler
}

// Routes is the service's one router.
func Routes(p Parts) http.Handler {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/webhook", p.Webhook)
	r.Group(func(r chi.Router) {
		if p.Verdicts != nil && p.Verdicts.Enabled() {
			r.Use(p.Verdicts.Require(edge.Unauthorized))
		}
		r.Get("/verdict", p.API.Verdict)
		r.Get("/commits/{rev}", p.API.Commit)
		r.Get("/rollouts", p.API.Rollouts)
		r.Get("/environments", p.API.Environments)
	})
	r.Get("/healthz", p.API.Healthz)
	r.Get("/readyz", p.API.Readyz)
	if p.UI != nil {
		r.Mount("/ui", p.UI)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, edge.UIRoot, http.StatusFound) })
	}
	if p.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", p.Metrics)
	}
	return r
}

// New is the HTTP server of h, with timeouts for slow and idle clients
// (a long poll of /verdict extends its own), logging through log.
func New(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
