package channeltest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Contract is what the contract servers of webhooks share (Teams', the
// CloudEvents receiver): the HTTP server on loopback, the answers a test
// asks for before the next requests are read, the Retry-After a 429 said,
// and the requests that broke the contract. A server's handler calls
// Refused, Early and Violate under its own lock, before it reads on.
type Contract struct {
	srv *httptest.Server
	now func() time.Time

	mu          sync.Mutex
	statuses    []int
	limitedTill time.Time
	violations  []string
}

// StartContract serves h on loopback; now is the clock of Retry-After.
func StartContract(h http.HandlerFunc, now func() time.Time) *Contract {
	return &Contract{srv: httptest.NewServer(h), now: now}
}

// Base is the server's URL.
func (c *Contract) Base() string { return c.srv.URL }

// Client is an HTTP client of the server.
func (c *Contract) Client() *http.Client { return c.srv.Client() }

// Close stops the server.
func (c *Contract) Close() { c.srv.Close() }

// Answer makes the next requests answer these statuses (429 with
// Retry-After: 30).
func (c *Contract) Answer(statuses ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, statuses...)
}

// Violations are the requests that broke the contract, in words.
func (c *Contract) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Violate notes a request that broke the contract and answers 400 with
// body.
func (c *Contract) Violate(w http.ResponseWriter, body, format string, args ...any) {
	c.mu.Lock()
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
	c.mu.Unlock()
	http.Error(w, body, http.StatusBadRequest)
}

// Refused answers the request with the next status asked for, if any, and
// reports whether it did; a request before a Retry-After ended is a
// violation.
func (c *Contract) Refused(w http.ResponseWriter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Before(c.limitedTill) {
		c.violations = append(c.violations, fmt.Sprintf("a request at %s, before the Retry-After said (%s)", now.Format(time.TimeOnly), c.limitedTill.Format(time.TimeOnly)))
	}
	if len(c.statuses) == 0 {
		return false
	}
	st := c.statuses[0]
	c.statuses = c.statuses[1:]
	if st == http.StatusTooManyRequests {
		c.limitedTill = c.now().Add(30 * time.Second)
		w.Header().Set("Retry-After", "30")
	}
	w.WriteHeader(st)
	return true
}
