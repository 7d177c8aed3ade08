package main

import (
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
)

// placement is where the clusters are, for GET /environments and its
// page: --environments, over which the registered Secrets' labels win;
// the clusters shown even before their first rollout are those placed,
// those registered, and the service's own when it reads it. It is read
// afresh at every request: a Secret's label may change.
func (s *service) placement() api.Placement {
	labelled := map[string]string{}
	var known []string
	if s.reader != nil {
		known = append(known, s.c.engine.DefaultCluster)
	}
	if s.registered != nil {
		for _, st := range s.registered.States() {
			labelled[st.Name] = st.Environment
			known = append(known, st.Name)
		}
	}
	m, warnings := environments.New(s.c.environments, labelled)
	return api.Placement{Map: m, Clusters: append(known, m.Members()...), Warnings: warnings}
}
