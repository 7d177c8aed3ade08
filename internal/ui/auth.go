package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionCookie carries a login: its expiry and an HMAC of it under a key
// derived from the verdict token, so that sessions survive a restart and
// all end when the token is rotated.
const (
	sessionCookie = "fdn_session"
	sessionFor    = 12 * time.Hour
)

type auth struct {
	token       []byte
	key         []byte
	trustHeader string
	now         func() time.Time

	// Wrong tokens at the login form, per minute: guessing is slowed for
	// everyone (a bound per client would be a map an attacker can grow).
	mu       sync.Mutex
	window   time.Time
	failures int
}

// maxFailures is how many wrong tokens the login form takes a minute;
// the ones after are refused without being compared until it passes.
const maxFailures = 10

// allow reports whether a login attempt may be checked now.
func (a *auth) allow() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := a.now(); now.Sub(a.window) >= time.Minute {
		a.window, a.failures = now, 0
	}
	return a.failures < maxFailures
}

func (a *auth) failed() {
	a.mu.Lock()
	a.failures++
	a.mu.Unlock()
}

func newAuth(token []byte, trustHeader string, now func() time.Time) *auth {
	a := &auth{token: token, trustHeader: trustHeader, now: now}
	if token != nil {
		m := hmac.New(sha256.New, token)
		m.Write([]byte("flux-deploy-notifier ui session"))
		a.key = m.Sum(nil)
	}
	return a
}

func (a *auth) enabled() bool { return a.token != nil }

// ok reports whether r may see data.
func (a *auth) ok(r *http.Request) bool {
	if a.token == nil {
		return true
	}
	if a.trustHeader != "" && r.Header.Get(a.trustHeader) != "" {
		return true
	}
	if scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") {
		return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), a.token) == 1
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && a.valid(c.Value)
}

func (a *auth) sign(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(exp))
	return exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *auth) valid(v string) bool {
	exp, _, ok := strings.Cut(v, ".")
	n, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || !a.now().Before(time.Unix(n, 0)) {
		return false
	}
	return hmac.Equal([]byte(v), []byte(a.sign(time.Unix(n, 0))))
}

// require lets in a request that may see data; a browser without a
// session is sent to the login form, anything else gets 401.
func (a *auth) require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.ok(r) {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Authorization") == "" && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/ui/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="flux-deploy-notifier"`)
		http.Error(w, "this page requires the verdict token", http.StatusUnauthorized)
	})
}

// localNext is where to go after logging in: a page of the UI, never
// another site.
func localNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
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
	s.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: localNext(r.URL.Query().Get("next")), Open: !s.auth.enabled()}})
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "malformed form", http.StatusBadRequest)
		return
	}
	next := localNext(r.PostForm.Get("next"))
	if !s.auth.enabled() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !s.auth.allow() {
		w.Header().Set("Retry-After", "60")
		s.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Log in", Data: loginData{Next: next, Throttled: true}})
		return
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostForm.Get("token"))), s.auth.token) != 1 {
		s.auth.failed()
		s.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Data: loginData{Next: next, Failed: true}})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.auth.sign(s.opts.Now().Add(sessionFor)), Path: "/ui/",
		MaxAge: int(sessionFor / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: https(r),
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https(r)})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// https reports whether the browser reached the service over TLS, itself
// or through a proxy that says so.
func https(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
