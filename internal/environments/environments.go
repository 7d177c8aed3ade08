// Package environments groups clusters into environments, in promotion
// order: which commit runs where, and what lies between two environments,
// are read per environment from the verdicts of its clusters.
//
// A cluster's environment is its cluster Secret's fluxdeploy.dev/environment
// label; the local cluster and clusters known by events alone are placed by
// --environments ("staging=stg-eu,stg-us;prod=prod-eu,prod-us"), whose order
// is the promotion order (lower first). An environment may be named there
// without clusters ("staging;prod"), to order environments that Secrets'
// labels fill. A cluster in none is an environment of its own.
package environments

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Declared is an environment as --environments declares it: clusters a
// commit is promoted through together.
type Declared struct {
	Name     string
	Clusters []string // as declared
}

// Parse reads --environments: environments separated by ";", each a name,
// then "=" and its clusters separated by "," (or no "=": its clusters
// come from Secrets' labels). A cluster in two environments, a name twice
// or an empty one is an error.
func Parse(s string) ([]Declared, error) {
	var envs []Declared
	in := map[string]string{} // cluster -> environment
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, list, _ := strings.Cut(part, "=")
		env := Declared{Name: strings.TrimSpace(name)}
		if env.Name == "" {
			return nil, fmt.Errorf("environments: %q names no environment", part)
		}
		if slices.ContainsFunc(envs, func(e Declared) bool { return e.Name == env.Name }) {
			return nil, fmt.Errorf("environments: %s is declared twice", env.Name)
		}
		for c := range strings.SplitSeq(list, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			if other, ok := in[c]; ok {
				return nil, fmt.Errorf("environments: cluster %s is in %s and %s", c, other, env.Name)
			}
			in[c] = env.Name
			env.Clusters = append(env.Clusters, c)
		}
		envs = append(envs, env)
	}
	return envs, nil
}

// Map is which environment each cluster is in, and their order.
type Map struct {
	order    []string          // environments, in promotion order
	declared int               // the first of order, in --environments' order
	of       map[string]string // cluster -> environment
}

// New is the membership declared (Parse's) with the registered clusters'
// labels (cluster -> its Secret's environment label, "" for none): a
// Secret's label places its cluster, the declaration the others.
// Environments that labels alone name come after the declared ones, by
// name. Warnings say where the two disagree, which the label settles, and
// which environments have no place in the declared order.
func New(declared []Declared, labelled map[string]string) (*Map, []string) {
	m := &Map{of: map[string]string{}}
	var warnings []string
	m.declared = len(declared)
	for _, e := range declared {
		m.order = append(m.order, e.Name)
		for _, c := range e.Clusters {
			m.of[c] = e.Name
		}
	}
	var extra []string
	for _, c := range slices.Sorted(maps.Keys(labelled)) {
		env := labelled[c]
		if env == "" {
			continue
		}
		if d, ok := m.of[c]; ok && d != env {
			warnings = append(warnings, fmt.Sprintf("cluster %s: its Secret's label puts it in %s, --environments in %s; the label wins", c, env, d))
		}
		m.of[c] = env
		if !slices.Contains(m.order, env) && !slices.Contains(extra, env) {
			extra = append(extra, env)
		}
	}
	slices.Sort(extra)
	for _, env := range extra {
		warnings = append(warnings, fmt.Sprintf("environment %s is not in --environments: it comes after those declared", env))
	}
	m.order = append(m.order, extra...)
	return m, warnings
}

// Of is cluster's environment: its own name when it is in none.
func (m *Map) Of(cluster string) string {
	if env, ok := m.of[cluster]; ok {
		return env
	}
	return cluster
}

// Order is the environments of clusters in promotion order: the declared
// and labelled ones first, as New ordered them, then each cluster in none,
// by name. An environment with none of clusters is left out.
func (m *Map) Order(clusters []string) []string {
	has := map[string]bool{}
	for _, c := range clusters {
		has[m.Of(c)] = true
	}
	var order []string
	for _, env := range m.order {
		if has[env] {
			order = append(order, env)
			delete(has, env)
		}
	}
	return append(order, slices.Sorted(maps.Keys(has))...)
}

// Promoted reports whether env has a place in the declared promotion
// order: only those are compared (Between); environments that labels
// alone name, and clusters in none, are shown without.
func (m *Map) Promoted(env string) bool {
	return slices.Contains(m.order[:m.declared], env)
}

// String is m in full: the order, and each cluster's environment.
func (m *Map) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %d", m.order, m.declared)
	for _, c := range m.Members() {
		fmt.Fprintf(&b, " %s=%s", c, m.of[c])
	}
	return b.String()
}

// Members are the clusters the declaration and the labels place, by name:
// each is shown, even one that never reported.
func (m *Map) Members() []string {
	return slices.Sorted(maps.Keys(m.of))
}
