// Package teamstest is a contract server of Teams' Workflows webhooks
// (the trigger "When a Teams webhook request is received", and the
// Adaptive Card it posts, as Microsoft documents them): it checks every
// request and keeps the cards by webhook (its path), so that tests see
// what each channel would show.
package teamstest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/channeltest"
)

// maxBody is Teams' limit on a message: 28 KB.
const maxBody = 28 << 10

// Card is an Adaptive Card as the checks read it.
type Card struct {
	Type    string `json:"type"`
	Version string `json:"version"`
	Body    []struct {
		Type    string `json:"type"`
		Inlines []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"inlines"`
	} `json:"body"`
	Actions []struct {
		Type  string `json:"type"`
		Title string `json:"title"`
		URL   string `json:"url"`
	} `json:"actions"`
}

// Text is everything the card shows, its runs joined by lines.
func (c Card) Text() string {
	var b strings.Builder
	for _, e := range c.Body {
		for _, r := range e.Inlines {
			b.WriteString(r.Text + "\n")
		}
	}
	return b.String()
}

// Server is the contract server.
type Server struct {
	*channeltest.Contract
	URL string // a webhook's URL is URL + "/workflows/" + a name + "?sig=…"

	mu    sync.Mutex
	cards map[string][]Card // by webhook name
}

// New starts a server; now is its clock (for Retry-After).
func New(now func() time.Time) *Server {
	s := &Server{cards: map[string][]Card{}}
	s.Contract = channeltest.StartContract(s.serve, now)
	s.URL = s.Base()
	return s
}

// Hook is the URL of the webhook name, its signature the secret.
func (s *Server) Hook(name string) string {
	return s.URL + "/workflows/" + name + "/triggers/manual/paths/invoke?api-version=1&sig=secret-" + name
}

// Cards returns the cards the webhook name posted, oldest first.
func (s *Server) Cards(name string) []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Card(nil), s.cards[name]...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	violate := func(format string, args ...any) {
		s.Violate(w, `{"error":{"code":"InvalidRequestContent"}}`, format, args...)
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/workflows/")
	name, _, _ = strings.Cut(name, "/")
	if !ok || r.URL.Query().Get("sig") != "secret-"+name {
		http.Error(w, `{"error":{"code":"DirectApiAuthorizationRequired"}}`, http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		violate("%s with Content-Type %q: a webhook takes a POST of JSON", r.Method, r.Header.Get("Content-Type"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	if s.Refused(w) {
		return
	}
	var post struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string          `json:"contentType"`
			ContentURL  *string         `json:"contentUrl"`
			Content     json.RawMessage `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(body, &post); err != nil {
		violate("not JSON: %v", err)
		return
	}
	if post.Type != "message" || len(post.Attachments) != 1 || post.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" || post.Attachments[0].ContentURL != nil {
		violate("want a message with one Adaptive Card attachment (contentUrl null), got %s", body)
		return
	}
	var card Card
	if err := json.Unmarshal(post.Attachments[0].Content, &card); err != nil {
		violate("the card: %v", err)
		return
	}
	if why := check(card); why != "" {
		violate("%s", why)
		return
	}
	s.cards[name] = append(s.cards[name], card)
	w.WriteHeader(http.StatusAccepted)
}

// check applies the card schema's rules the service's cards meet:
// version 1.4 or below (what Teams renders), RichTextBlocks of TextRuns
// (no Markdown read), OpenUrl actions to http(s) addresses.
func check(c Card) string {
	if c.Type != "AdaptiveCard" || (c.Version != "1.2" && c.Version != "1.3" && c.Version != "1.4") {
		return fmt.Sprintf("card type %q version %q", c.Type, c.Version)
	}
	if len(c.Body) == 0 {
		return "an empty card"
	}
	for i, e := range c.Body {
		if e.Type != "RichTextBlock" || len(e.Inlines) == 0 {
			return fmt.Sprintf("element %d: %q, want a RichTextBlock of runs", i, e.Type)
		}
		for _, r := range e.Inlines {
			if r.Type != "TextRun" || r.Text == "" {
				return fmt.Sprintf("element %d: an inline %q with text %q", i, r.Type, r.Text)
			}
		}
	}
	for _, a := range c.Actions {
		if a.Type != "Action.OpenUrl" || a.Title == "" || !(strings.HasPrefix(a.URL, "https://") || strings.HasPrefix(a.URL, "http://")) {
			return fmt.Sprintf("action %+v", a)
		}
	}
	return ""
}
