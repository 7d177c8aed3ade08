package cluster

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// Rules is the least privilege the reader needs: get, list and watch on the
// kinds it reads (the rows of flux's table with a resource), nothing else,
// one rule per API group. The install's ClusterRole grants exactly these;
// a test serves with a user bound to them alone.
func Rules() []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, k := range flux.Kinds() {
		g := k.Resource
		if g.Resource == "" {
			continue
		}
		i := len(rules) - 1
		if i < 0 || rules[i].APIGroups[0] != g.Group {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g.Group}, Verbs: []string{"get", "list", "watch"}})
			i++
		}
		rules[i].Resources = append(rules[i].Resources, g.Resource)
	}
	return rules
}
