package edge

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SessionCookie carries a status page login: its expiry and an HMAC of it
// under a key derived from the token, so that sessions survive a restart
// and all end when the token is rotated.
const SessionCookie = "fdn_session"

// Auth is who may see data: a request that presents the token as
// "Authorization: Bearer", carries a login session made with it, or (when
// a header is trusted) comes through an authenticating proxy that set that
// header. Without a token, everyone may.
type Auth struct {
	token       []byte
	key         []byte // of the sessions
	trustHeader string
	now         func() time.Time
}

// NewAuth checks token; trustHeader, when not "", is the header an
// authenticating proxy sets, which lets a request in by its presence:
// only for what is reached through that proxy alone.
func NewAuth(token []byte, trustHeader string, now func() time.Time) *Auth {
	if now == nil {
		now = time.Now
	}
	a := &Auth{token: token, trustHeader: trustHeader, now: now}
	if token != nil {
		m := hmac.New(sha256.New, token)
		m.Write([]byte("flux-deploy-notifier ui session"))
		a.key = m.Sum(nil)
	}
	return a
}

// Enabled reports whether a token is required.
func (a *Auth) Enabled() bool { return a.token != nil }

// Token reports whether s is the token, in constant time. An empty token
// matches nothing.
func (a *Auth) Token(s string) bool {
	return len(a.token) > 0 && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(s)), a.token) == 1
}

// Bearer reports whether r presents the token as Authorization: Bearer.
func (a *Auth) Bearer(r *http.Request) bool {
	tok, ok := bearer(r)
	return ok && a.Token(tok)
}

func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return tok, ok && strings.EqualFold(scheme, "Bearer")
}

// Allowed reports whether r may see data. A request that presents a
// bearer token is judged by it alone.
func (a *Auth) Allowed(r *http.Request) bool {
	switch {
	case a.token == nil:
		return true
	case a.trustHeader != "" && r.Header.Get(a.trustHeader) != "":
		return true
	}
	if tok, ok := bearer(r); ok {
		return a.Token(tok)
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && a.validSession(c.Value)
}

// Require lets in what Allowed and answers the rest with deny.
func (a *Auth) Require(deny http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a.Allowed(r) {
				next.ServeHTTP(w, r)
				return
			}
			deny(w, r)
		})
	}
}

// Unauthorized is the answer to a request without the token, for clients
// that are not browsers.
func Unauthorized(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="flux-deploy-notifier"`)
	Refuse(w, http.StatusUnauthorized, "", "this service requires Authorization: Bearer <verdict token>")
}

// Session is the value of a session cookie valid until expires.
func (a *Auth) Session(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(exp))
	return exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *Auth) validSession(v string) bool {
	exp, _, ok := strings.Cut(v, ".")
	n, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || !a.now().Before(time.Unix(n, 0)) {
		return false
	}
	return hmac.Equal([]byte(v), []byte(a.Session(time.Unix(n, 0))))
}
