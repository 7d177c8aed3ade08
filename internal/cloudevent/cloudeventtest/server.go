// Package cloudeventtest is a receiver of signed CloudEvents that checks
// every request against the CloudEvents spec's HTTP binding (read by
// github.com/cloudevents/sdk-go's own binding) and the generic-hmac
// signature, and keeps the events, each id once, counting repeats.
package cloudeventtest

import (
	"bytes"
	"crypto/hmac"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

// Server is the receiver.
type Server struct {
	URL string
	srv *httptest.Server
	key []byte
	now func() time.Time

	mu          sync.Mutex
	events      []event.Event
	repeats     int
	statuses    []int
	limitedTill time.Time
	violations  []string
}

// New starts a receiver that checks signatures with key.
func New(key []byte, now func() time.Time) *Server {
	s := &Server{key: key, now: now}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/hooks/fdn"
	return s
}

// Client is an HTTP client of the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Answer makes the next requests answer these statuses (429 with
// Retry-After: 30) before reading them.
func (s *Server) Answer(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses = append(s.statuses, statuses...)
}

// Events are the events received, each id once, in order.
func (s *Server) Events() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// Repeats counts the events received again (an id seen before).
func (s *Server) Repeats() int { s.mu.Lock(); defer s.mu.Unlock(); return s.repeats }

// Violations are the requests that broke the contract, in words.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	violate := func(format string, args ...any) {
		s.violations = append(s.violations, fmt.Sprintf(format, args...))
		http.Error(w, "bad event", http.StatusBadRequest)
	}
	if now := s.now(); now.Before(s.limitedTill) {
		s.violations = append(s.violations, fmt.Sprintf("a request at %s, before the Retry-After said (%s)", now.Format(time.TimeOnly), s.limitedTill.Format(time.TimeOnly)))
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		violate("read: %v", err)
		return
	}
	if len(s.statuses) > 0 {
		st := s.statuses[0]
		s.statuses = s.statuses[1:]
		if st == http.StatusTooManyRequests {
			s.limitedTill = s.now().Add(30 * time.Second)
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(st)
		return
	}
	if r.Method != http.MethodPost {
		violate("%s: events are POSTed", r.Method)
		return
	}
	if got, want := r.Header.Get("X-Signature"), webhook.Sign(s.key, body); !hmac.Equal([]byte(got), []byte(want)) {
		http.Error(w, "signature", http.StatusUnauthorized)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/cloudevents+json") {
		violate("Content-Type %q: want structured mode", r.Header.Get("Content-Type"))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	msg := cehttp.NewMessageFromHttpRequest(r)
	if msg.ReadEncoding() != binding.EncodingStructured {
		violate("not a structured CloudEvent")
		return
	}
	e, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		violate("not a CloudEvent: %v", err)
		return
	}
	if err := e.Validate(); err != nil {
		violate("invalid: %v", err)
		return
	}
	if e.SpecVersion() != event.CloudEventsVersionV1 || !strings.HasPrefix(e.Type(), cloudevent.TypePrefix) || e.DataContentType() != event.ApplicationJSON {
		violate("specversion %q, type %q, datacontenttype %q", e.SpecVersion(), e.Type(), e.DataContentType())
		return
	}
	if r.Header.Get("Idempotency-Key") != e.ID() {
		violate("Idempotency-Key %q is not the id %q", r.Header.Get("Idempotency-Key"), e.ID())
		return
	}
	for _, seen := range s.events {
		if seen.ID() == e.ID() && seen.Source() == e.Source() {
			s.repeats++
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	s.events = append(s.events, *e)
	w.WriteHeader(http.StatusAccepted)
}
