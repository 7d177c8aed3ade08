package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

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
	resp, err := s.EnvironmentStatus(r.URL.Query().Get("source"))
	if err != nil {
		edge.WriteError(w, s.log, fmt.Errorf("read what runs where: %w", err))
		return
	}
	edge.WriteJSON(w, http.StatusOK, resp)
}

// EnvironmentStatus is what GET /environments answers, for the status
// page too.
func (s *Server) EnvironmentStatus(source string) (*EnvironmentsResponse, error) {
	hs, err := s.rs.Histories()
	if err != nil {
		return nil, err
	}
	p := Placement{}
	if s.place != nil {
		p = s.place()
	}
	if p.Map == nil {
		p.Map, _ = environments.New(nil, nil)
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
	st := p.Map.Status(slices.Sorted(maps.Keys(clusters)), func(c string) environments.History { return hs[c] })
	return &EnvironmentsResponse{Status: st, Source: source, Warnings: append(append([]string{}, p.Warnings...), s.warnings()...)}, nil
}
