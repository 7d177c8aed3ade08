// Package slacktest is a contract server of Slack's Web API methods the
// service calls (chat.postMessage, chat.update), as Slack documents them
// (https://api.slack.com/methods/chat.postMessage, chat.update, Block
// Kit's limits): it checks every request and keeps the messages, so that
// tests and the e2e's Slack stand-in see what a channel would show.
package slacktest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Message is one message of a channel, as last posted or updated.
type Message struct {
	Channel, TS string
	Text        string  // the fallback text
	Blocks      []Block // as the request gave them
	ThreadTS    string  // a reply's parent
	Updates     int
}

// Block is a Block Kit block, as far as the checks read it.
type Block struct {
	Type     string       `json:"type"`
	Text     *TextObject  `json:"text,omitempty"`
	Elements []TextObject `json:"elements,omitempty"`
	Fields   []TextObject `json:"fields,omitempty"`
}

// TextObject is a composition object of text.
type TextObject struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji *bool  `json:"emoji,omitempty"`
}

// Server is the contract server.
type Server struct {
	URL string // ends in /api/, as Slack's
	srv *httptest.Server

	mu       sync.Mutex
	token    string
	channels map[string]string // name -> id
	messages []*Message
	seq      int
	now      func() time.Time
	// refusals are the answers of the next requests: a Slack error or a
	// 429 for a while.
	refusals    []refusal
	limitedTill time.Time
	violations  []string
	calls       map[string]int
	// answering, when set, is called once a method took effect, before
	// its answer is written: a test kills the caller there.
	answering func(method string)
}

type refusal struct {
	err        string        // Slack's error, or "" with retryAfter
	retryAfter time.Duration // a 429
}

// New starts a server that takes token and knows channels (names, each
// given the id "C" + upper-case name); now is its clock (for Retry-After).
func New(token string, now func() time.Time, channels ...string) *Server {
	s := &Server{token: token, channels: map[string]string{}, now: now, calls: map[string]int{}}
	for _, c := range channels {
		s.channels[c] = "C" + strings.ToUpper(strings.NewReplacer("-", "", "_", "").Replace(c))
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/api/"
	return s
}

// Client is an HTTP client of the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// SetToken changes the token it takes (a rotation).
func (s *Server) SetToken(t string) { s.mu.Lock(); s.token = t; s.mu.Unlock() }

// Answering calls f once each method took effect, before its answer is
// written (under the server's lock: f must not call the server).
func (s *Server) Answering(f func(method string)) { s.mu.Lock(); s.answering = f; s.mu.Unlock() }

// Refuse makes the next request answer Slack's error err (ok: false).
func (s *Server) Refuse(err string) {
	s.mu.Lock()
	s.refusals = append(s.refusals, refusal{err: err})
	s.mu.Unlock()
}

// Limit makes the next n requests answer 429 with Retry-After; a request
// before the time it said is a violation.
func (s *Server) Limit(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.refusals = append(s.refusals, refusal{retryAfter: retryAfter})
	}
}

// Violations are the requests that broke the contract, in words.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Calls counts the requests to method.
func (s *Server) Calls(method string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls[method] }

// Messages returns the channel's messages (its id or name), oldest
// first, replies included.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.channels[strings.TrimPrefix(channel, "#")]; ok {
		channel = id
	}
	var out []Message
	for _, m := range s.messages {
		if m.Channel == channel {
			out = append(out, *m)
		}
	}
	return out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	s.calls[method]++
	violate := func(format string, args ...any) {
		s.violations = append(s.violations, method+": "+fmt.Sprintf(format, args...))
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/api/") {
		violate("%s %s: Slack's Web API methods are POSTed under /api/", r.Method, r.URL.Path)
		return
	}
	if now := s.now(); now.Before(s.limitedTill) {
		s.violations = append(s.violations, fmt.Sprintf("%s at %s, before the Retry-After said (%s)", method, now.Format(time.TimeOnly), s.limitedTill.Format(time.TimeOnly)))
	}
	form, err := readArgs(r)
	if err != nil {
		violate("%v", err)
		return
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if token == "" {
		token = form.Get("token")
	}
	if len(s.refusals) > 0 {
		f := s.refusals[0]
		s.refusals = s.refusals[1:]
		if f.err == "" {
			s.limitedTill = s.now().Add(f.retryAfter)
			w.Header().Set("Retry-After", fmt.Sprint(int(f.retryAfter.Seconds())))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		answer(w, map[string]any{"ok": false, "error": f.err})
		return
	}
	if token != s.token {
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	switch method {
	case "chat.postMessage", "chat.update":
	default:
		answer(w, map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	channel := form.Get("channel")
	id, ok := s.channels[strings.TrimPrefix(channel, "#")]
	if !ok {
		for _, c := range s.channels {
			ok = ok || c == channel
		}
		id = channel
	}
	if !ok {
		answer(w, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	}
	var blocks []Block
	if b := form.Get("blocks"); b != "" {
		if err := json.Unmarshal([]byte(b), &blocks); err != nil {
			violate("blocks are not a JSON array of blocks: %v", err)
			return
		}
		if why := checkBlocks(blocks); why != "" {
			answer(w, map[string]any{"ok": false, "error": "invalid_blocks", "errors": []string{why}})
			return
		}
	}
	text := form.Get("text")
	if text == "" && blocks == nil {
		answer(w, map[string]any{"ok": false, "error": "no_text"})
		return
	}
	if len([]rune(text)) > 40000 {
		answer(w, map[string]any{"ok": false, "error": "msg_too_long"})
		return
	}
	if method == "chat.update" {
		m := s.find(id, form.Get("ts"))
		if m == nil {
			answer(w, map[string]any{"ok": false, "error": "message_not_found"})
			return
		}
		m.Text, m.Blocks = text, blocks
		m.Updates++
		s.took(method)
		answer(w, map[string]any{"ok": true, "channel": id, "ts": m.TS, "text": text})
		return
	}
	parent := form.Get("thread_ts")
	if parent != "" && s.find(id, parent) == nil {
		answer(w, map[string]any{"ok": false, "error": "thread_not_found"})
		return
	}
	s.seq++
	m := &Message{Channel: id, TS: fmt.Sprintf("1765000000.%06d", s.seq), Text: text, Blocks: blocks, ThreadTS: parent}
	s.messages = append(s.messages, m)
	s.took(method)
	answer(w, map[string]any{"ok": true, "channel": id, "ts": m.TS, "message": map[string]any{"ts": m.TS, "text": text}})
}

// Delete removes a message, as a person in the channel may.
func (s *Server) Delete(channel, ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.messages {
		if m.Channel == channel && m.TS == ts {
			s.messages = append(s.messages[:i], s.messages[i+1:]...)
			return
		}
	}
}

func (s *Server) took(method string) {
	if s.answering != nil {
		s.answering(method)
	}
}

func (s *Server) find(channel, ts string) *Message {
	for _, m := range s.messages {
		if m.Channel == channel && m.TS == ts {
			return m
		}
	}
	return nil
}

// readArgs reads a method's arguments: a form (what slack-go sends for
// these methods) or JSON.
func readArgs(r *http.Request) (url.Values, error) {
	ct := r.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/x-www-form-urlencoded"):
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		return r.PostForm, nil
	case strings.HasPrefix(ct, "application/json"):
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, err
		}
		v := url.Values{}
		for k, x := range body {
			if s, ok := x.(string); ok {
				v.Set(k, s)
			} else if b, err := json.Marshal(x); err == nil {
				v.Set(k, string(b))
			}
		}
		if r.Header.Get("Authorization") == "" {
			return nil, fmt.Errorf("JSON without Authorization: Bearer")
		}
		return v, nil
	}
	return nil, fmt.Errorf("Content-Type %q: Slack takes a form or JSON", ct)
}

// checkBlocks applies Block Kit's limits to the blocks the service sends:
// at most 50; a header's text plain_text of at most 150 characters; a
// section's text at most 3,000; a context's at most 10 elements.
func checkBlocks(blocks []Block) string {
	if len(blocks) > 50 {
		return "more than 50 blocks"
	}
	for i, b := range blocks {
		switch b.Type {
		case "header":
			if b.Text == nil || b.Text.Type != "plain_text" || len([]rune(b.Text.Text)) > 150 || b.Text.Text == "" {
				return fmt.Sprintf("block %d: a header's text is plain_text of 1 to 150 characters", i)
			}
		case "section":
			if b.Text == nil || b.Text.Text == "" || len([]rune(b.Text.Text)) > 3000 || (b.Text.Type != "plain_text" && b.Text.Type != "mrkdwn") {
				return fmt.Sprintf("block %d: a section's text is 1 to 3000 characters", i)
			}
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				return fmt.Sprintf("block %d: a context has 1 to 10 elements", i)
			}
		default:
			return fmt.Sprintf("block %d: type %q is not one this service sends", i, b.Type)
		}
	}
	return ""
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}
