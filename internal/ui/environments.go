package ui

import (
	"fmt"
	"net/http"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
)

// environmentsData is the environments page: what runs where, and what
// lies between two environments.
type environmentsData struct {
	Source string
	environments.Status
}

// environments serves /ui/environments: each environment in promotion
// order with its clusters' running commits, in flight and last failures,
// then what lies between each two.
func (s *server) environments(w http.ResponseWriter, r *http.Request) {
	if s.opts.Environments == nil {
		s.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found"})
		return
	}
	source := r.URL.Query().Get("source")
	st, err := s.opts.Environments(source)
	if err != nil {
		edge.WriteError(w, s.opts.Log, fmt.Errorf("read what runs where: %w", err))
		return
	}
	s.render(w, r, http.StatusOK, "environments", page{Title: "Environments", Data: environmentsData{Source: source, Status: st}})
}
