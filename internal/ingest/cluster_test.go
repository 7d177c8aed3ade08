package ingest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func TestMembership(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 500, time.FixedZone("", 3600))
	hash := "731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: "flux-system", Name: "apps"}}
	k.Spec.SourceRef = kustomizev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "fleet"}
	k.Spec.DependsOn = []kustomizev1.DependencyReference{{Name: "infra"}, {Namespace: "platform", Name: "db"}}
	for _, tt := range []struct {
		name          string
		suspend, gone bool
		current       string
		want          rollout.Signal
	}{
		{"expected", false, false, "main@sha1:" + hash, rollout.SignalExpected},
		{"legacy revision", false, false, "main/" + hash, rollout.SignalExpected},
		{"suspended", true, false, "main@sha1:" + hash, rollout.SignalSuspended},
		{"deleted", false, true, "main@sha1:" + hash, rollout.SignalSuspended},
		{"no artifact yet", false, false, "", 0},
	} {
		k.Spec.Suspend = tt.suspend
		o, ok := Membership(k, tt.gone, "prod", tt.current, at)
		if tt.want == 0 {
			if ok {
				t.Errorf("%s: %+v, want none", tt.name, o)
			}
			continue
		}
		want := rollout.Observation{Cluster: "prod", Emitter: rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"},
			Revision: "main@sha1:" + hash, Hash: hash, At: at.UTC().Truncate(time.Second), Signal: tt.want,
			DependsOn: []string{"flux-system/infra", "platform/db"}}
		if !ok || !reflect.DeepEqual(o, want) {
			t.Errorf("%s: %+v, want %+v", tt.name, o, want)
		}
	}
	if src := SourceOf(k); src != (rollout.Emitter{Role: rollout.RoleSource, Kind: "GitRepository", Namespace: "flux-system", Name: "fleet"}) {
		t.Errorf("SourceOf = %+v", src)
	}
}

// TestArtifactNamesItsCommit: an OCI artifact built from a commit says so
// (org.opencontainers.image.revision), as kustomize-controller's events
// do in originRevision; one without the annotation names none.
func TestArtifactNamesItsCommit(t *testing.T) {
	digest := "latest@sha256:" + strings.Repeat("d", 64)
	for _, tt := range []struct {
		metadata map[string]string
		origin   string
	}{
		{map[string]string{flux.OCIRevisionMetadata: "main@sha1:" + strings.Repeat("c", 40)}, strings.Repeat("c", 40)},
		{nil, ""},
	} {
		src := &sourcev1.OCIRepository{}
		src.Status.Artifact = &meta.Artifact{Revision: digest, Metadata: tt.metadata, LastUpdateTime: metav1.NewTime(at)}
		o, ok := Artifact(src, "prod", Emitter("OCIRepository", "flux-system", "fleet"))
		if !ok || o.Hash != strings.Repeat("d", 64) || o.OriginHash != tt.origin || tt.origin != "" && o.Origin != "main@sha1:"+tt.origin {
			t.Errorf("Artifact of %v: %+v, %v; want origin %q", tt.metadata, o, ok, tt.origin)
		}
	}
}
