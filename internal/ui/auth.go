package ui

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
)

// sessionFor is how long a login lasts.
const sessionFor = 12 * time.Hour

// auth is the edge's check of who may see data, and the login form's
// throttle.
type auth struct {
	*edge.Auth
	now    func() time.Time
	shared Attempts // when set, the count all replicas share

	// Wrong tokens at the login form, per minute: guessing is slowed for
	// everyone (a bound per client would be a map an attacker can grow).
	mu       sync.Mutex
	window   time.Time
	failures int
}

// maxFailures is how many wrong tokens the login form takes a minute;
// the ones after are refused without being compared until it passes.
const maxFailures = 10

// Attempts counts the wrong tokens at the login form where every replica
// counts them (the store), so that the limit holds across replicas.
type Attempts interface {
	// Failures is how many wrong tokens came in the minute under way.
	Failures() (int, error)
	// Failed counts one more.
	Failed() error
}

// allow reports whether a login attempt may be checked now. A shared
// count that cannot be read allows none: guessing is not helped by a
// store that fails.
func (a *auth) allow() bool {
	if a.shared != nil {
		n, err := a.shared.Failures()
		return err == nil && n < maxFailures
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := a.now(); now.Sub(a.window) >= time.Minute {
		a.window, a.failures = now, 0
	}
	return a.failures < maxFailures
}

func (a *auth) failed() {
	if a.shared != nil {
		_ = a.shared.Failed() // unrecorded, it allows one more; the next is refused if the store stays down
		return
	}
	a.mu.Lock()
	a.failures++
	a.mu.Unlock()
}

func newAuth(token []byte, trustHeader string, now func() time.Time) *auth {
	return &auth{Auth: edge.NewAuth(token, trustHeader, now), now: now}
}

// deny sends a browser without a session to the login form; anything
// else gets 401.
func deny(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, edge.UIRoot+"login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
		return
	}
	edge.Unauthorized(w, r)
}

// localNext is where to go after logging in: a page of the UI, never
// another site.
func localNext(next string) string {
	if !strings.HasPrefix(next, edge.UIRoot) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return edge.UIRoot
	}
	return next
}

type loginData struct {
	Next      string
	Failed    bool
	Throttled bool // too many wrong tokens this minute
	Open      bool // no token configured: nothing to log in to
}

func (s *server) loginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: localNext(r.URL.Query().Get("next")), Open: !s.auth.Enabled()}})
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "malformed form", http.StatusBadRequest)
		return
	}
	next := localNext(r.PostForm.Get("next"))
	if !s.auth.Enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !s.auth.allow() {
		w.Header().Set("Retry-After", "60")
		s.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Log in", Data: loginData{Next: next, Throttled: true}})
		return
	}
	if !s.auth.Token(r.PostForm.Get("token")) {
		s.auth.failed()
		s.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Data: loginData{Next: next, Failed: true}})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: edge.SessionCookie, Value: s.auth.Session(s.opts.Now().Add(sessionFor)), Path: edge.UIRoot,
		MaxAge: int(sessionFor / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: https(r),
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: edge.SessionCookie, Value: "", Path: edge.UIRoot, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https(r)})
	http.Redirect(w, r, edge.UIRoot+"login", http.StatusSeeOther)
}

// https reports whether the browser reached the service over TLS, itself
// or through a proxy that says so.
func https(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
