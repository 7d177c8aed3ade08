package ingest

import (
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// What the cluster reader sees besides a layer's status (Status): which
// source a layer applies, what it depends on, whether it is suspended, and
// the revision a source has, as observations like the webhook's.

// SourceOf is the source a Kustomization applies; its namespace when the
// reference names none, as kustomize-controller reads it.
func SourceOf(k *kustomizev1.Kustomization) rollout.Emitter {
	ref := k.Spec.SourceRef
	if ref.Namespace == "" {
		ref.Namespace = k.Namespace
	}
	return Emitter(ref.Kind, ref.Namespace, ref.Name)
}

// RoleOf is what an object of Flux's kind is to rollouts, by its role in
// flux's table of kinds; 0 for the kinds this service does not follow.
func RoleOf(kind string) rollout.Role {
	switch flux.RoleOf(kind) {
	case flux.Layer:
		return rollout.RoleLayer
	case flux.Source:
		return rollout.RoleSource
	case flux.Release:
		return rollout.RoleRelease
	}
	return 0
}

// Emitter names the Flux object of kind namespace/name, with its role.
func Emitter(kind, namespace, name string) rollout.Emitter {
	return rollout.Emitter{Role: RoleOf(kind), Kind: kind, Namespace: namespace, Name: name}
}

// Layer names the Kustomization namespace/name.
func Layer(namespace, name string) rollout.Emitter {
	return Emitter(flux.KindKustomization, namespace, name)
}

// DependsOn lists a Kustomization's dependencies as namespace/name, its
// own namespace when one names none.
func DependsOn(k *kustomizev1.Kustomization) []string {
	var out []string
	for _, d := range k.Spec.DependsOn {
		ns := d.Namespace
		if ns == "" {
			ns = k.Namespace
		}
		if d.Name != "" {
			out = append(out, ns+"/"+d.Name)
		}
	}
	return out
}

// Membership is the cluster's word at at that a Kustomization must apply
// its source's current revision (SignalExpected), or that it will not
// while it is suspended or once it is deleted (gone: SignalSuspended),
// with what it depends on; false when the revision is none Flux writes.
func Membership(k *kustomizev1.Kustomization, gone bool, cluster, current string, at time.Time) (rollout.Observation, bool) {
	rev, err := flux.ParseRevision(current)
	if err != nil {
		return rollout.Observation{}, false
	}
	sig := rollout.SignalExpected
	if k.Spec.Suspend || gone {
		sig = rollout.SignalSuspended
	}
	return rollout.Observation{
		Cluster: cluster, Emitter: Layer(k.Namespace, k.Name),
		Revision: rev.String(), Hash: rev.Hash, At: at.UTC().Truncate(time.Second), Signal: sig, DependsOn: DependsOn(k),
	}, true
}

// ArtifactRevision is a source's current artifact revision and when it
// was stored; "" before its first artifact.
func ArtifactRevision(src sourcev1.Source) (string, time.Time) {
	a := src.GetArtifact()
	if a == nil {
		return "", time.Time{}
	}
	return a.Revision, a.LastUpdateTime.UTC()
}

// Artifact is what a source's status says, as its artifact event would:
// the revision em has had since the artifact's time, and the commit an OCI
// artifact was built from (its org.opencontainers.image.revision, which
// kustomize-controller's events carry as originRevision); false before
// its first artifact.
func Artifact(src sourcev1.Source, cluster string, em rollout.Emitter) (rollout.Observation, bool) {
	rev, at := ArtifactRevision(src)
	h, err := flux.ParseRevision(rev)
	if err != nil || at.IsZero() {
		return rollout.Observation{}, false
	}
	o := rollout.Observation{Cluster: cluster, Emitter: em, Revision: h.String(), Hash: h.Hash, At: at, Signal: rollout.SignalArtifact}
	if origin, err := flux.ParseRevision(src.GetArtifact().Metadata[flux.OCIRevisionMetadata]); err == nil {
		o.Origin, o.OriginHash = origin.String(), origin.Hash
	}
	return o, true
}
