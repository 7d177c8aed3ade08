// Package ui serves the status page people open from a mail: the recent
// rollouts, one rollout with its layers on a timeline, one layer's
// history. The pages are rendered on the server from embedded templates
// and read without JavaScript; one small script only refreshes a live
// rollout's page. Everything shown from Flux is text from any tenant's
// repository, so it is escaped by html/template, and a strict
// Content-Security-Policy runs no script but the embedded one.
package ui

import (
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Rollouts is what the pages read: the engine's read side.
type Rollouts interface {
	Get(k rollout.Key) *rollout.View
	Page(q engine.PageQuery) (engine.Page, error)
	Changed(ctx context.Context, k rollout.Key, seen *rollout.View) *rollout.View
	Supersedes(v *rollout.View) ([]*rollout.View, error)
}

// Options are the pages' optional parts.
type Options struct {
	// Token is the verdict token. When set, a page shows data only to a
	// request that carries it (Authorization: Bearer), a session made by
	// the login form, or TrustHeader.
	Token []byte
	// TrustHeader names a header an authenticating proxy in front of the
	// service sets (oauth2-proxy's X-Auth-Request-Email); a request with
	// it is let in. Empty: no header is trusted.
	TrustHeader string
	// Warnings are what people must know of (the pipe from Flux is
	// silent, storing fails, a mail is stuck); none when all is well.
	Warnings func() []string
	// Draining, when set, ends when the server shuts down: a live page's
	// long poll answers at once.
	Draining context.Context
	// Outbox counts the mails waiting and the dead letters.
	Outbox func() (pending, dead int, err error)
	// Mails tells what became of a rollout's mails.
	Mails func(rollout.Key) ([]outbox.MailStatus, error)
	// Channels are where the verdicts are shown besides the pages (a
	// forge, a chat, a webhook): each tells what it was given of a
	// rollout's verdict.
	Channels []Channel
	Now      func() time.Time
	Log      *slog.Logger
	// Attempts, when set, counts the login form's wrong tokens where
	// every replica does; nil: in this process.
	Attempts Attempts
	// Clusters, when set, are the clusters the service reads and how
	// each is read, shown on the list page.
	Clusters func() []Cluster
	// Environments, when set, is what runs where (GET /environments's
	// answer), of one source's rollouts or all (""): the environments page.
	Environments func(source string) (environments.Status, error)
}

// Cluster is a cluster the service reads, as the list page shows it.
type Cluster struct {
	Name        string
	Environment string // "" for none
	From        string // "its own" or the Secret registering it (namespace/name)
	// State is "read", "failing" (read, its requests or access failing),
	// "not-read", or "elsewhere" (read by another replica); Detail says
	// why.
	State  string
	Detail string
	Layers int // those read, when State is read or failing
}

// PageSize is how many rollouts a page of the list shows.
const PageSize = 50

// maxLivePoll bounds one long poll of a live rollout's page.
const maxLivePoll = 25 * time.Second

type server struct {
	rs    Rollouts
	opts  Options
	pages map[string]*template.Template
	auth  *auth
}

// New returns the pages' handler, to be mounted at /ui. fsys holds the
// templates and the static files (templates.UI).
func New(rs Rollouts, fsys fs.FS, opts Options) (http.Handler, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &server{rs: rs, opts: opts, pages: map[string]*template.Template{}, auth: newAuth(opts.Token, opts.TrustHeader, opts.Now)}
	s.auth.shared = opts.Attempts
	funcs := template.FuncMap{
		"age":   func(t time.Time) string { return since(opts.Now().Sub(t)) },
		"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
		"short": flux.Short,
		"took": func(v *rollout.View) string {
			d, soFar := took(v, opts.Now())
			if soFar {
				return d + " so far"
			}
			return d
		},
		"rolloutURL": func(cluster, hash string) string { return edge.RolloutPath(rollout.Key{Cluster: cluster, Hash: hash}) },
		"layerURL":   edge.LayerPath,
	}
	for _, name := range []string{"list", "rollout", "layer", "environments", "login", "notfound"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(fsys, "layout.html", name+".html")
		if err != nil {
			return nil, err
		}
		s.pages[name] = t
	}
	static, err := fs.Sub(fsys, "static")
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	r.Use(secure)
	// Static files hold no data: they load on the login page too.
	r.Get("/static/*", http.StripPrefix(edge.UIRoot+"static/", http.FileServerFS(static)).ServeHTTP)
	r.Get("/login", s.loginForm)
	r.Post("/login", s.login)
	r.Post("/logout", s.logout)
	r.Group(func(r chi.Router) {
		r.Use(s.auth.Require(deny))
		r.Get("/", s.list)
		r.Get("/environments", s.environments)
		r.Get("/layers/{namespace}/{name}", s.layer)
		r.Get("/{cluster}/{hash}", s.rollout)
		r.Get("/{cluster}/{hash}/wait", s.wait)
	})
	return r, nil
}

// secure sets the headers every page carries: no script but the service's
// own, no framing, no sniffing, nothing cached.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, edge.UIRoot+"static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title    string
	Auth     bool // a session can be ended (logout shown)
	Warnings []string
	Outbox   int
	Dead     int
	Data     any
	Now      time.Time
	LiveWait string // set on a live rollout's page: where the script long-polls
}

func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Now = s.opts.Now()
	p.Auth = s.auth.Enabled()
	if s.opts.Warnings != nil {
		p.Warnings = s.opts.Warnings()
	}
	if s.opts.Outbox != nil {
		if pending, dead, err := s.opts.Outbox(); err == nil {
			p.Outbox, p.Dead = pending, dead
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := s.pages[name].Execute(w, p); err != nil {
		s.opts.Log.Error("render page", "page", name, "path", r.URL.Path, "err", err)
	}
}

// listData is the list page.
type listData struct {
	Filter   listFilter
	Views    []*rollout.View
	Next     string // the next page's URL, "" on the last
	Verdicts []string
	Clusters []Cluster
}

type listFilter struct {
	Cluster, Verdict, Layer, Q string
}

func (f listFilter) keep() func(*rollout.View) bool {
	if f.Verdict == "" && f.Layer == "" && f.Q == "" {
		return nil
	}
	q := strings.ToLower(f.Q)
	return func(v *rollout.View) bool {
		if f.Verdict != "" && v.Verdict.String() != f.Verdict {
			return false
		}
		if f.Layer != "" && !hasLayer(v, f.Layer) {
			return false
		}
		return q == "" || strings.HasPrefix(v.Hash, q) || strings.HasPrefix(v.OriginHash, q) ||
			strings.Contains(strings.ToLower(v.Subject), q)
	}
}

func hasLayer(v *rollout.View, name string) bool {
	for _, l := range v.Layers.All() {
		if l.Name == name {
			return true
		}
	}
	return false
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	f := listFilter{Cluster: qs.Get("cluster"), Verdict: qs.Get("verdict"), Layer: qs.Get("layer"), Q: strings.TrimSpace(qs.Get("q"))}
	if f.Verdict != "" && !slices.Contains(verdictNames(), f.Verdict) {
		edge.Refuse(w, http.StatusBadRequest, "verdict", "verdict must be one of "+strings.Join(verdictNames(), ", "))
		return
	}
	pg, next, ok := s.page(w, r, f.Cluster, f.keep())
	if !ok {
		return
	}
	d := listData{Filter: f, Views: pg.Views, Next: next, Verdicts: verdictNames()}
	if s.opts.Clusters != nil {
		d.Clusters = s.opts.Clusters()
	}
	s.render(w, r, http.StatusOK, "list", page{Title: "Rollouts", Data: d})
}

// page reads the page of rollouts the request's "after" cursor asks for,
// and the URL of the next one: the same query, the cursor moved ("" on
// the last). It answers the request itself when it cannot.
func (s *server) page(w http.ResponseWriter, r *http.Request, cluster string, keep func(*rollout.View) bool) (engine.Page, string, bool) {
	qs := r.URL.Query()
	var after *engine.Cursor
	if a := qs.Get("after"); a != "" {
		c, err := engine.ParseCursor(a)
		if err != nil {
			edge.Refuse(w, http.StatusBadRequest, "after", "after: "+err.Error())
			return engine.Page{}, "", false
		}
		after = &c
	}
	pg, err := s.rs.Page(engine.PageQuery{Cluster: cluster, After: after, Limit: PageSize, Keep: keep})
	if err != nil {
		edge.WriteError(w, s.opts.Log, fmt.Errorf("list rollouts: %w", err))
		return engine.Page{}, "", false
	}
	next := ""
	if pg.Next != nil {
		qs.Set("after", pg.Next.String())
		next = r.URL.Path + "?" + qs.Encode()
	}
	return pg, next, true
}

// verdictNames are the verdicts a rollout in the list can have, as the
// filter names them: rollout's own, not a copy.
func verdictNames() []string {
	var out []string
	for _, v := range rollout.Verdicts() {
		out = append(out, v.String())
	}
	return out
}

// rolloutData is one rollout's page.
type rolloutData struct {
	V            *rollout.View
	Timeline     timeline
	SupersededBy *rollout.Key
	Duration     string
	SoFar        bool // not done: the duration up to now
	Supersedes   []*rollout.View
	Mails        []outbox.MailStatus
	Channels     []channelRow // those with a record of the rollout
}

// Channel is one place the verdicts are shown, as the pages tell of it.
type Channel struct {
	Name   string // "GitHub", "Slack"
	Record string // what it keeps of a rollout: "deployment", "message"
	// Publication returns its outbox's record of a rollout, false when
	// there is none.
	Publication func(rollout.Key) (outbox.Publication, bool, error)
}

// channelRow is a channel's record of a rollout as its page shows it.
type channelRow struct {
	Name, Record string
	outbox.Publication
}

func (s *server) rollout(w http.ResponseWriter, r *http.Request) {
	k := rollout.Key{Cluster: chi.URLParam(r, "cluster"), Hash: strings.ToLower(chi.URLParam(r, "hash"))}
	v := s.rs.Get(k)
	if v == nil {
		s.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found", Data: k})
		return
	}
	now := s.opts.Now()
	d := rolloutData{V: v, Timeline: newTimeline(v, now), SupersededBy: v.SupersedeKey}
	d.Duration, d.SoFar = took(v, now)
	var err error
	if d.Supersedes, err = s.rs.Supersedes(v); err != nil {
		s.opts.Log.Error("read the rollouts superseded", "cluster", k.Cluster, "hash", k.Hash, "err", err)
	}
	if s.opts.Mails != nil {
		if d.Mails, err = s.opts.Mails(k); err != nil {
			s.opts.Log.Error("read the mail log", "cluster", k.Cluster, "hash", k.Hash, "err", err)
		}
	}
	for _, c := range s.opts.Channels {
		if pub, ok, err := c.Publication(k); err != nil {
			s.opts.Log.Error("read the outbox of "+c.Name, "cluster", k.Cluster, "hash", k.Hash, "err", err)
		} else if ok {
			d.Channels = append(d.Channels, channelRow{Name: c.Name, Record: c.Record, Publication: pub})
		}
	}
	p := page{Title: flux.Short(v.CommitHash()) + " on " + v.Cluster, Data: d}
	if !v.Terminal {
		p.LiveWait = r.URL.Path + "/wait"
	}
	s.render(w, r, http.StatusOK, "rollout", p)
}

// wait long-polls for a live rollout's page: it answers with the verdict
// as soon as the rollout's view changes, or after maxLivePoll; the script
// then fetches the page again. It starts from the view as it is now, so a
// change between the page and the poll shows at the next one.
func (s *server) wait(w http.ResponseWriter, r *http.Request) {
	k := rollout.Key{Cluster: chi.URLParam(r, "cluster"), Hash: strings.ToLower(chi.URLParam(r, "hash"))}
	seen := s.rs.Get(k)
	if seen == nil {
		edge.Refuse(w, http.StatusNotFound, "", "no such rollout")
		return
	}
	v := seen
	if !seen.Terminal {
		ctx, cancel := context.WithTimeout(r.Context(), maxLivePoll)
		defer cancel()
		if s.opts.Draining != nil {
			defer context.AfterFunc(s.opts.Draining, cancel)()
		}
		if v = s.rs.Changed(ctx, k, seen); v == nil {
			v = seen
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(v.Verdict.String()))
}

// layerData is one layer's page: its recent rollouts.
type layerData struct {
	Name string
	Rows []layerRow
	Next string // the next page's URL, "" on the last
}

type layerRow struct {
	V     *rollout.View
	Layer rollout.LayerView
}

func (s *server) layer(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "namespace") + "/" + chi.URLParam(r, "name")
	pg, next, ok := s.page(w, r, "", func(v *rollout.View) bool { return hasLayer(v, name) })
	if !ok {
		return
	}
	d := layerData{Name: name, Next: next}
	for _, v := range pg.Views {
		for _, l := range v.Layers.All() {
			if l.Name == name {
				d.Rows = append(d.Rows, layerRow{V: v, Layer: l})
			}
		}
	}
	s.render(w, r, http.StatusOK, "layer", page{Title: name, Data: d})
}

// took is how long a rollout took, or has taken so far when it is not
// done (applying or stuck).
func took(v *rollout.View, now time.Time) (string, bool) {
	switch {
	case v.CompletedAt != nil:
		return since(v.CompletedAt.Sub(v.FirstSeen)), false
	case v.Verdict == rollout.VerdictApplying || v.Verdict == rollout.VerdictStuck:
		return since(now.Sub(v.FirstSeen)), true
	}
	return since(v.LastSeen.Sub(v.FirstSeen)), false // failed or superseded: over with its last evidence
}
