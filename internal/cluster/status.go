// Package cluster reads Flux's own state with client-go informers and feeds
// the engine the observations the webhook would: progress from each
// Kustomization's status, turned into observations by internal/ingest (so
// rollouts whose webhooks were lost still reach their verdict), and which
// layers must apply the current revision of each source (membership marks).
package cluster

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// sourceRef is the source a Kustomization applies, as an emitter.
func sourceRef(k *unstructured.Unstructured) rollout.Emitter {
	kind, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "kind")
	name, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "name")
	ns, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "namespace")
	if ns == "" {
		ns = k.GetNamespace()
	}
	return rollout.Emitter{Kind: kind, Namespace: ns, Name: name}
}

// dependsOn lists a Kustomization's dependencies as namespace/name.
func dependsOn(k *unstructured.Unstructured) []string {
	deps, _, _ := unstructured.NestedSlice(k.Object, "spec", "dependsOn")
	var out []string
	for _, d := range deps {
		m, _ := d.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = k.GetNamespace()
		}
		if name != "" {
			out = append(out, ns+"/"+name)
		}
	}
	return out
}

// artifactRevision is a source's current artifact revision and when it
// was stored.
func artifactRevision(src *unstructured.Unstructured) (string, time.Time) {
	rev, _, _ := unstructured.NestedString(src.Object, "status", "artifact", "revision")
	ts, _, _ := unstructured.NestedString(src.Object, "status", "artifact", "lastUpdateTime")
	at, _ := time.Parse(time.RFC3339, ts)
	return rev, at.UTC()
}
