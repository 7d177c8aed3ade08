package ingest

import (
	"reflect"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
