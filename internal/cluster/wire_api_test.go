package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// TestLayerListWatchOnAnAPIServer: the Kustomizations' client against a
// real kube-apiserver, both ways an informer syncs: a list in pages (an
// API server without streaming lists), and a watch that streams the
// initial objects then a bookmark marking their end (client-go's
// default). Each layer arrives whole but for its inventory.
func TestLayerListWatchOnAnAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	rev := "main@sha1:731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
	w := c.NewWorld(t, "fleet", time.Now().UTC().Truncate(time.Second))
	w.Source("src", rev)
	for i := range 3 {
		if err := w.CreateFleetLayer(clustertest.FleetLayer{Name: fmt.Sprintf("layer-%d", i), Source: "src", Rev: rev, Objects: 20, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	lw, err := cluster.LayerListWatch(c.Config, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(how string, k *kustomizev1.Kustomization) {
		t.Helper()
		if k.Status.LastAppliedRevision != rev || k.Spec.SourceRef.Name != "src" || k.Status.Inventory != nil || k.ManagedFields != nil || k.ResourceVersion == "" {
			t.Fatalf("%s: %s decoded as %+v", how, k.Name, k)
		}
	}

	var names []string
	for cont := ""; ; {
		obj, err := lw.ListWithContext(ctx, metav1.ListOptions{Limit: 2, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		l := obj.(*kustomizev1.KustomizationList)
		for i := range l.Items {
			check("list", &l.Items[i])
			names = append(names, l.Items[i].Name)
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if fmt.Sprint(names) != "[layer-0 layer-1 layer-2]" {
		t.Fatalf("listed %v", names)
	}

	wi, err := lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	added := 0
	for deadline := time.After(30 * time.Second); ; {
		select {
		case ev := <-wi.ResultChan():
			k, ok := ev.Object.(*kustomizev1.Kustomization)
			if !ok {
				t.Fatalf("a %s event's object is a %T", ev.Type, ev.Object)
			}
			switch ev.Type {
			case watch.Added:
				check("watch", k)
				added++
				continue
			case watch.Bookmark:
				if k.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
			default:
				t.Fatalf("a %s event", ev.Type)
			}
		case <-deadline:
			t.Fatal("no bookmark ending the initial events within 30 s")
		}
		break
	}
	if added != 3 {
		t.Fatalf("%d layers streamed before the bookmark, want 3", added)
	}
}
