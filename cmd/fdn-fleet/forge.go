package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// github stands in for GitHub's deployments API in the fleet (-github): it
// makes every deployment asked for and keeps each one's last state, so that
// the run measures the service with a forge and checks that every verdict
// reached it. The API's contract is the tests' (internal/channel/forge/forgetest);
// this only answers, fast.
type github struct {
	URL string
	srv *http.Server

	mu       sync.Mutex
	next     int64
	commit   map[int64]string // deployment -> commit
	last     map[string]string
	statuses int
}

func startGitHub() (*github, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &github{URL: "http://" + ln.Addr().String(), commit: map[int64]string{}, last: map[string]string{}}
	g.srv = &http.Server{Handler: http.HandlerFunc(g.serve), ReadHeaderTimeout: 10 * time.Second}
	go g.srv.Serve(ln)
	return g, nil
}

func (g *github) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	path := strings.TrimPrefix(r.URL.Path, "/repos/acme/fleet/deployments")
	switch {
	case r.Method == http.MethodGet && path == "":
		fmt.Fprint(w, "[]")
	case r.Method == http.MethodPost && path == "":
		g.next++
		g.commit[g.next], _ = body["ref"].(string)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, g.next)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/statuses"):
		var id int64
		fmt.Sscanf(path, "/%d/statuses", &id)
		state, _ := body["state"].(string)
		g.last[g.commit[id]] = state
		g.statuses++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, g.statuses)
	default:
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
	}
}

// successes counts the commits whose last state is success, and the
// deployments and statuses made.
func (g *github) successes() (ok, deployments, statuses int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.last {
		if s == "success" {
			ok++
		}
	}
	return ok, len(g.commit), g.statuses
}

// await waits until want commits show success, for up to timeout.
func (g *github) await(want int, timeout time.Duration) (ok, deployments, statuses int, waited time.Duration) {
	start := time.Now()
	for {
		ok, deployments, statuses = g.successes()
		if ok >= want || time.Since(start) > timeout {
			return ok, deployments, statuses, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
