package forgetest

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Request is one request a contract server received.
type Request struct {
	Method, Path string
	At           time.Time
	Answered     int // the status it was answered with, 0 when dropped
}

// Fault is an answer a contract server gives instead of serving a
// request: a status with its headers and body, or (Drop) the connection
// closed without an answer.
type Fault struct {
	Status int
	Header http.Header
	Body   string
	Drop   bool
	// Taking, when set, runs before the answer is written: a test moves
	// its clock on, as an answer that takes time to arrive would.
	Taking func()
}

// server is what every contract server shares: its lock, the requests it
// received and the faults a test injects.
type server struct {
	URL string

	now      func() time.Time
	mu       sync.Mutex
	faults   []Fault
	down     bool
	requests []Request
}

// Inject queues faults: the next requests get them, one each, in order.
func (s *server) Inject(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f...)
}

// SetDown makes the server drop every connection (down) or serve again.
func (s *server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Requests returns every request received so far.
func (s *server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// receive records r, with s.mu held, and drops its connection when the
// server is down or the next fault says so (dropped).
func (s *server) receive(w http.ResponseWriter, r *http.Request) (rec *Request, dropped bool) {
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, At: s.now()})
	rec = &s.requests[len(s.requests)-1]
	if s.down || len(s.faults) > 0 && s.faults[0].Drop {
		if !s.down {
			s.faults = s.faults[1:]
		}
		drop(w)
		return rec, true
	}
	return rec, false
}

// fault answers with the next fault queued, if any.
func (s *server) fault(w http.ResponseWriter, rec *Request) bool {
	if len(s.faults) == 0 {
		return false
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	if f.Taking != nil {
		f.Taking()
	}
	rec.Answered = raw(w, f.Status, f.Header, f.Body)
	return true
}

func raw(w http.ResponseWriter, status int, h http.Header, body string) int {
	for k, vs := range h {
		w.Header()[k] = vs
	}
	if w.Header().Get("Content-Type") == "" && body != "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
	return status
}

// drop closes the connection without an answer: the client sees a
// network error.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
