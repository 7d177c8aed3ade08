// Package cloudeventtest is a receiver of signed CloudEvents that checks
// every request against the CloudEvents spec's HTTP binding (read by
// github.com/cloudevents/sdk-go's own binding) and the generic-hmac
// signature, and keeps the events, each id once, counting repeats.
package cloudeventtest

import (
	"bytes"
	"crypto/hmac"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/channeltest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// Server is the receiver.
type Server struct {
	*channeltest.Contract
	URL string
	key []byte

	mu      sync.Mutex
	events  []event.Event
	repeats int
}

// New starts a receiver that checks signatures with key; now is its
// clock (for Retry-After).
func New(key []byte, now func() time.Time) *Server {
	s := &Server{key: key}
	s.Contract = channeltest.StartContract(s.serve, now)
	s.URL = s.Base() + "/hooks/fdn"
	return s
}

// Events are the events received, each id once, in order.
func (s *Server) Events() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// Repeats counts the events received again (an id seen before).
func (s *Server) Repeats() int { s.mu.Lock(); defer s.mu.Unlock(); return s.repeats }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	violate := func(format string, args ...any) { s.Violate(w, "bad event", format, args...) }
	body, err := io.ReadAll(r.Body)
	if err != nil {
		violate("read: %v", err)
		return
	}
	if s.Refused(w) {
		return
	}
	if r.Method != http.MethodPost {
		violate("%s: events are POSTed", r.Method)
		return
	}
	if got, want := r.Header.Get("X-Signature"), signature.Sign(s.key, body); !hmac.Equal([]byte(got), []byte(want)) {
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
