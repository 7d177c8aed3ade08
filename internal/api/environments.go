package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Placement is where clusters are: the environments' map, the clusters it
// places or the service reads (shown even before their first rollout),
// and what the map's sources disagree on.
type Placement struct {
	Map      *environments.Map
	Clusters []string
	Warnings []string
}

// EnvironmentsResponse is the body of GET /environments, as clients (the
// wait command) decode it.
type EnvironmentsResponse struct {
	environments.Status
	// Source is the source whose rollouts were read ("" for all).
	Source   string   `json:"source,omitempty"`
	Warnings []string `json:"warnings"`
}

// Environments answers GET /environments: what runs where, environment by
// environment in promotion order, and what lies between them, read from
// the rollouts' verdicts (internal/environments). source, as on
// /rollouts, reads one source's rollouts alone: on a cluster with several,
// each has its own line of commits.
func (s *Server) Environments(w http.ResponseWriter, r *http.Request) {
	_, body, err := s.environments(r.URL.Query().Get("source"), true)
	if err != nil {
		edge.WriteError(w, s.log, fmt.Errorf("read what runs where: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// EnvironmentStatus is what GET /environments answers, for the status
// page too. It must not be changed: it may be the next request's.
func (s *Server) EnvironmentStatus(source string) (*EnvironmentsResponse, error) {
	resp, _, err := s.environments(source, false)
	return resp, err
}

// envCache is the last answer of GET /environments, kept while nothing it
// is read from changed: the rollouts (the reader's generation), where the
// clusters are, the warnings and the source asked. At a hub's 500 clusters
// an answer takes milliseconds to make; pages and pipelines asking again
// meanwhile take it as it is.
type envCache struct {
	mu   sync.Mutex
	gen  uint64
	key  string
	resp *EnvironmentsResponse
	body []byte // resp in JSON, once a request wrote it
}

// environments is the answer to source, from the cache when it holds, and
// with json its JSON.
func (s *Server) environments(source string, withJSON bool) (*EnvironmentsResponse, []byte, error) {
	gen := s.rs.Generation()
	p := Placement{}
	if s.place != nil {
		p = s.place()
	}
	if p.Map == nil {
		p.Map, _ = environments.New(nil, nil)
	}
	warnings := append(append([]string{}, p.Warnings...), s.warnings()...)
	key := fmt.Sprintf("%q %q %s %q", source, p.Clusters, p.Map, warnings)
	c := &s.envs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resp == nil || c.gen != gen || c.key != key {
		resp, err := s.environmentStatus(source, p, warnings)
		if err != nil {
			return nil, nil, err
		}
		c.gen, c.key, c.resp, c.body = gen, key, resp, nil
	}
	if withJSON && c.body == nil {
		b, err := json.Marshal(c.resp)
		if err != nil {
			return nil, nil, err
		}
		c.body = append(b, '\n')
	}
	return c.resp, c.body, nil
}

func (s *Server) environmentStatus(source string, p Placement, warnings []string) (*EnvironmentsResponse, error) {
	hs, err := s.rs.Histories()
	if err != nil {
		return nil, err
	}
	clusters := map[string]bool{}
	for _, c := range p.Clusters {
		clusters[c] = true
	}
	for c := range hs {
		clusters[c] = true
	}
	if source != "" {
		for c, h := range hs {
			h.Rollouts = slices.DeleteFunc(slices.Clone(h.Rollouts), func(v *rollout.View) bool { return v.Source.String() != source })
			hs[c] = h
		}
	}
	st := p.Map.Status(slices.Sorted(maps.Keys(clusters)), hs)
	return &EnvironmentsResponse{Status: st, Source: source, Warnings: warnings}, nil
}
