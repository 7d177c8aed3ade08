package flux

import (
	"slices"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds of the objects this service understands.
const (
	KindKustomization = kustomizev1.KustomizationKind
	KindGitRepository = sourcev1.GitRepositoryKind
	KindOCIRepository = sourcev1.OCIRepositoryKind
	KindBucket        = sourcev1.BucketKind
	// KindHelmRelease is helm-controller's release: an object a layer
	// applies that rolls out on its own.
	KindHelmRelease = helmv2.HelmReleaseKind
)

// The one table of kinds: what each kind of Flux object is to this
// service, the resource the cluster reader watches for it and Flux's type
// it caches it in. The webhook bounds its metric labels to these, the
// reader and the ClusterRole read the layers, the sources and the
// releases, ingest turns their events into observations.

// Kustomizations is the resource of the layers.
var Kustomizations = kustomizev1.GroupVersion.WithResource("kustomizations")

// HelmReleases is the resource of the releases.
var HelmReleases = helmv2.GroupVersion.WithResource("helmreleases")

// SourceKind is a kind of source whose revisions layers apply.
type SourceKind struct {
	Kind     string
	Resource schema.GroupVersionResource
	New      func() sourcev1.Source // Flux's type, in which the reader caches it
}

var sourceKinds = []SourceKind{
	{KindGitRepository, sourcev1.GroupVersion.WithResource("gitrepositories"), func() sourcev1.Source { return &sourcev1.GitRepository{} }},
	{KindOCIRepository, sourcev1.GroupVersion.WithResource("ocirepositories"), func() sourcev1.Source { return &sourcev1.OCIRepository{} }},
	{KindBucket, sourcev1.GroupVersion.WithResource("buckets"), func() sourcev1.Source { return &sourcev1.Bucket{} }},
}

// SourceKinds are the kinds of source layers apply, in a fixed order: a
// copy, the table stays as it is.
func SourceKinds() []SourceKind { return slices.Clone(sourceKinds) }

// Source returns the source kind named kind; false when it is none.
func Source(kind string) (SourceKind, bool) {
	for _, sk := range sourceKinds {
		if sk.Kind == kind {
			return sk, true
		}
	}
	return SourceKind{}, false
}

// IsSource reports whether kind is a source that produces revisions.
func IsSource(kind string) bool {
	_, ok := Source(kind)
	return ok
}

// otherKinds are the kinds notification-controller forwards events of
// that this service counts but does not follow: Helm's chart sources (a
// HelmRelease's own events tell of its chart) and the image automation's.
var otherKinds = []string{sourcev1.HelmRepositoryKind, sourcev1.HelmChartKind, "ImageRepository", "ImagePolicy", "ImageUpdateAutomation"}

// KnownKind reports whether kind is one of Flux's this service knows: a
// layer, a source, a release, or a kind it counts events of.
func KnownKind(kind string) bool {
	if kind == KindKustomization || IsSource(kind) || kind == KindHelmRelease {
		return true
	}
	for _, k := range otherKinds {
		if k == kind {
			return true
		}
	}
	return false
}
