package cluster

import (
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

const kustomizationKind = flux.KindKustomization

// Rules is the least privilege the reader needs: get, list and watch on the
// kinds it reads, nothing else. The install's ClusterRole grants exactly
// these; a test serves with a user bound to them alone.
func Rules() []rbacv1.PolicyRule {
	verbs := []string{"get", "list", "watch"}
	rules := []rbacv1.PolicyRule{{APIGroups: []string{kustomizations.Group}, Resources: []string{kustomizations.Resource}, Verbs: verbs}}
	var src []string
	for _, sk := range flux.SourceKinds() {
		src = append(src, sk.Resource.Resource)
	}
	return append(rules, rbacv1.PolicyRule{APIGroups: []string{sourcev1.GroupVersion.Group}, Resources: src, Verbs: verbs},
		rbacv1.PolicyRule{APIGroups: []string{flux.HelmReleases.Group}, Resources: []string{flux.HelmReleases.Resource}, Verbs: verbs})
}

// Resource is the API resource the reader watches for a kind
// (Kustomization, GitRepository, OCIRepository, Bucket, HelmRelease).
func Resource(kind string) schema.GroupVersionResource {
	switch kind {
	case kustomizationKind:
		return kustomizations
	case flux.KindHelmRelease:
		return flux.HelmReleases
	}
	sk, _ := flux.Source(kind)
	return sk.Resource
}
