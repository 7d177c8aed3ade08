package flux

import (
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// Role is what the objects of a kind are to rollouts.
type Role uint8

const (
	// Counted: notification-controller forwards its events, which are
	// counted but not followed.
	Counted Role = iota
	// Layer applies its source's revisions (a Kustomization).
	Layer
	// Source produces the revisions layers apply.
	Source
	// Release rolls out on its own after a layer applied it (a
	// HelmRelease).
	Release
)

// Kind is one row of the table of Flux's kinds: what the objects of a kind
// are to this service, and how they are read. The webhook bounds its
// metric labels to the table; ingest gives each object its kind's role;
// the cluster reader watches and slims the kinds it has a resource for,
// and the ClusterRole grants exactly those; the generated Alert sends the
// events of every kind with Alert. A new source kind is one row.
type Kind struct {
	Kind string
	Role Role
	// Resource is what the cluster reader watches (get, list and watch in
	// the ClusterRole); zero for a kind it does not read.
	Resource schema.GroupVersionResource
	// New is Flux's type the reader caches an object of the kind in,
	// slimmed to what is read.
	New func() runtime.Object
	// Spec names the fields of spec the reader keeps beyond its role's
	// (a GitRepository's url: the repository a forge shows it in).
	Spec []string
	// ArtifactMetadata names the metadata of a source's artifact the
	// reader keeps (an OCI artifact's: the commit it was built from, and
	// its repository).
	ArtifactMetadata []string
	// Repository reads the URL of the repository a source's object (as
	// cached) names, if any: where a forge shows its rollouts.
	Repository func(runtime.Object) (string, bool)
	// Alert: the generated Alert sends the kind's events.
	Alert bool
}

var kinds = []Kind{
	{Kind: KindKustomization, Role: Layer, Resource: kustomizev1.GroupVersion.WithResource("kustomizations"),
		New: func() runtime.Object { return &kustomizev1.Kustomization{} }, Alert: true},
	{Kind: KindGitRepository, Role: Source, Resource: sourcev1.GroupVersion.WithResource("gitrepositories"),
		New: func() runtime.Object { return &sourcev1.GitRepository{} }, Spec: []string{"url"}, Alert: true,
		Repository: func(o runtime.Object) (string, bool) {
			u := o.(*sourcev1.GitRepository).Spec.URL
			return u, u != ""
		}},
	{Kind: KindOCIRepository, Role: Source, Resource: sourcev1.GroupVersion.WithResource("ocirepositories"),
		New:              func() runtime.Object { return &sourcev1.OCIRepository{} },
		ArtifactMetadata: []string{OCIRevisionMetadata, OCISourceMetadata}, Alert: true,
		Repository: func(o runtime.Object) (string, bool) {
			if a := o.(*sourcev1.OCIRepository).GetArtifact(); a != nil {
				u, ok := a.Metadata[OCISourceMetadata]
				return u, ok
			}
			return "", false
		}},
	{Kind: KindBucket, Role: Source, Resource: sourcev1.GroupVersion.WithResource("buckets"),
		New: func() runtime.Object { return &sourcev1.Bucket{} }, Alert: true},
	{Kind: KindHelmRelease, Role: Release, Resource: helmv2.GroupVersion.WithResource("helmreleases"),
		New: func() runtime.Object { return &helmv2.HelmRelease{} }, Alert: true},
	// Helm's chart sources (a HelmRelease's own events tell of its
	// chart) and the image automation's.
	{Kind: sourcev1.HelmRepositoryKind},
	{Kind: sourcev1.HelmChartKind},
	{Kind: "ImageRepository"},
	{Kind: "ImagePolicy"},
	{Kind: "ImageUpdateAutomation"},
}

// Kinds is the table, in a fixed order: a copy, the table stays as it is.
func Kinds() []Kind {
	out := make([]Kind, len(kinds))
	copy(out, kinds)
	return out
}

// KindsOf is the table's rows of role, in its order.
func KindsOf(role Role) []Kind {
	var out []Kind
	for _, k := range kinds {
		if k.Role == role {
			out = append(out, k)
		}
	}
	return out
}

// KindOf returns the row of kind; false when the table has none.
func KindOf(kind string) (Kind, bool) {
	for _, k := range kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return Kind{}, false
}

// RoleOf is the role of kind's objects: Counted for a kind the table does
// not have.
func RoleOf(kind string) Role {
	k, _ := KindOf(kind)
	return k.Role
}

// The one row of the layers' and of the releases' kinds.
func layerKind() Kind   { return KindsOf(Layer)[0] }
func releaseKind() Kind { return KindsOf(Release)[0] }

// Kustomizations is the resource of the layers.
func Kustomizations() schema.GroupVersionResource { return layerKind().Resource }

// HelmReleases is the resource of the releases.
func HelmReleases() schema.GroupVersionResource { return releaseKind().Resource }

// SourceKinds are the kinds of source layers apply, in the table's order.
func SourceKinds() []Kind { return KindsOf(Source) }

// IsSource reports whether kind is a source that produces revisions.
func IsSource(kind string) bool { return RoleOf(kind) == Source }

// KnownKind reports whether kind is one of Flux's this service knows: a
// layer, a source, a release, or a kind it counts events of.
func KnownKind(kind string) bool {
	_, ok := KindOf(kind)
	return ok
}
