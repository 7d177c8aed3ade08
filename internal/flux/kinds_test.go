package flux

import (
	"reflect"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
)

// TestKindsTable: every kind the reader watches is cached in Flux's type of
// that kind; the roles are where each consumer looks for them.
func TestKindsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		if seen[k.Kind] {
			t.Errorf("%s twice", k.Kind)
		}
		seen[k.Kind] = true
		if (k.Resource.Resource != "") != (k.New != nil) || (k.Resource.Resource != "") != (k.Role != Counted) {
			t.Errorf("%s: a followed kind is read and cached, a counted one neither: %+v", k.Kind, k)
		}
		if k.New != nil {
			if obj := k.New(); reflect.TypeOf(obj).Elem().Name() != k.Kind {
				t.Errorf("a %s is cached as a %T", k.Kind, obj)
			}
		}
		if k.Alert != (k.Role != Counted) {
			t.Errorf("%s: the Alert sends the events of every kind followed, and only those", k.Kind)
		}
	}
	for _, sk := range SourceKinds() {
		if !IsSource(sk.Kind) || !KnownKind(sk.Kind) || RoleOf(sk.Kind) != Source {
			t.Errorf("%s is not a known source", sk.Kind)
		}
	}
	if got := len(SourceKinds()); got != 3 {
		t.Errorf("%d source kinds, want GitRepository, OCIRepository and Bucket", got)
	}
	if IsSource(KindKustomization) || !KnownKind(KindKustomization) || !KnownKind(KindHelmRelease) || KnownKind("Deployment") ||
		RoleOf(KindKustomization) != Layer || RoleOf(KindHelmRelease) != Release || RoleOf("HelmChart") != Counted || RoleOf("Deployment") != Counted {
		t.Error("the kinds are mixed up")
	}
	git, _ := KindOf(KindGitRepository)
	oci, _ := KindOf(KindOCIRepository)
	repo := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: "https://example.com/acme/fleet"}}
	art := &sourcev1.OCIRepository{Status: sourcev1.OCIRepositoryStatus{Artifact: &meta.Artifact{
		Metadata: map[string]string{OCISourceMetadata: "https://example.com/acme/oci"}}}}
	if u, ok := git.Repository(repo); !ok || u != "https://example.com/acme/fleet" {
		t.Errorf("a GitRepository's repository: %q %v", u, ok)
	}
	if u, ok := oci.Repository(art); !ok || u != "https://example.com/acme/oci" {
		t.Errorf("an OCI artifact's repository: %q %v", u, ok)
	}
	if _, ok := oci.Repository(&sourcev1.OCIRepository{}); ok {
		t.Error("an OCIRepository without an artifact names a repository")
	}
	if Kustomizations().Resource != "kustomizations" || HelmReleases().Resource != "helmreleases" {
		t.Errorf("resources %v %v", Kustomizations(), HelmReleases())
	}
}
