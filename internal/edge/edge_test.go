package edge_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func TestAuthAllowed(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := edge.NewAuth([]byte("s3cret"), "X-Auth-Request-Email", clock)
	noProxy := edge.NewAuth([]byte("s3cret"), "", clock)
	other := edge.NewAuth([]byte("rotated"), "", clock)
	session := a.Session(now.Add(time.Hour))
	tests := []struct {
		name    string
		auth    *edge.Auth
		headers map[string]string
		cookie  string
		want    bool
	}{
		{"nothing", a, nil, "", false},
		{"bearer", a, map[string]string{"Authorization": "Bearer s3cret"}, "", true},
		{"bearer, any case, spaces", a, map[string]string{"Authorization": "bearer  s3cret "}, "", true},
		{"wrong bearer", a, map[string]string{"Authorization": "Bearer s3cre"}, "", false},
		{"wrong bearer with a valid session", a, map[string]string{"Authorization": "Bearer nope"}, session, false},
		{"basic is no bearer; the session decides", a, map[string]string{"Authorization": "Basic czNjcmV0"}, session, true},
		{"session", a, nil, session, true},
		{"expired session", a, nil, a.Session(now), false},
		{"forged session", a, nil, strings.Replace(session, ".", ".x", 1), false},
		{"session of a rotated token", other, nil, session, false},
		{"trusted proxy header", a, map[string]string{"X-Auth-Request-Email": "dev@example.com"}, "", true},
		{"proxy header not trusted", noProxy, map[string]string{"X-Auth-Request-Email": "dev@example.com"}, "", false},
		{"no token: open", edge.NewAuth(nil, "", clock), nil, "", true},
		{"an empty token matches nothing", edge.NewAuth([]byte{}, "", clock), map[string]string{"Authorization": "Bearer "}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/verdict", nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			if tt.cookie != "" {
				r.AddCookie(&http.Cookie{Name: edge.SessionCookie, Value: tt.cookie})
			}
			if got := tt.auth.Allowed(r); got != tt.want {
				t.Errorf("Allowed = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRequireAnswers401(t *testing.T) {
	h := edge.NewAuth([]byte("s3cret"), "", nil).Require(edge.Unauthorized)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/verdict", nil))
	var body edge.Error
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusUnauthorized || body.Message == "" {
		t.Fatalf("%d %q (%v), want 401 with an error body", w.Code, w.Body, err)
	}
	if w.Header().Get("WWW-Authenticate") == "" {
		t.Error("no WWW-Authenticate")
	}
	r := httptest.NewRequest(http.MethodGet, "/verdict", nil)
	r.Header.Set("Authorization", "Bearer s3cret")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTeapot {
		t.Errorf("with the token: %d, want the handler's", w.Code)
	}
}

func TestWriteErrorHidesInternalDetail(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	w := httptest.NewRecorder()
	edge.WriteError(w, log, errors.New("bolt: page 42 corrupt"))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "corrupt") || !strings.Contains(w.Body.String(), `"error":"internal error"`) {
		t.Errorf("%d %s", w.Code, w.Body)
	}
	if !strings.Contains(logs.String(), "page 42 corrupt") {
		t.Errorf("the detail is not logged: %s", logs.String())
	}
	w = httptest.NewRecorder()
	edge.WriteError(w, log, &edge.Error{Status: http.StatusConflict, Message: "ambiguous", Field: "rev", Matches: []rollout.Key{{Cluster: "c", Hash: "ab"}}})
	if w.Code != http.StatusConflict || w.Body.String() != `{"error":"ambiguous","field":"rev","matches":[{"Cluster":"c","Hash":"ab"}]}`+"\n" {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}

func TestPaths(t *testing.T) {
	if got, want := edge.RolloutPath(rollout.Key{Cluster: "eu/west 1", Hash: "abc"}), "/ui/eu%2Fwest%201/abc"; got != want {
		t.Errorf("RolloutPath = %q, want %q", got, want)
	}
	if got, want := edge.LayerPath("apps/web?x"), "/ui/layers/apps/web%3Fx"; got != want {
		t.Errorf("LayerPath = %q, want %q", got, want)
	}
}
