package clusters_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
)

var (
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// event is a reader started or stopped by the registry.
type event struct {
	what string // "start" or "stop"
	c    clusters.Cluster
	err  error // start: reading the cluster with its Config
}

// hub is a registry on a real kube-apiserver, whose readers say when they
// start and stop.
type hub struct {
	t      *testing.T
	dyn    dynamic.Interface
	events chan event
	reg    *clusters.Registry
}

func startHub(t *testing.T, ctx context.Context, hubCluster *clustertest.Cluster, ns string) (*hub, chan error) {
	h := &hub{t: t, dyn: dynamic.NewForConfigOrDie(hubCluster.Config), events: make(chan event, 16)}
	for _, name := range []string{ns, "elsewhere"} {
		nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
		if _, err := h.dyn.Resource(namespacesGVR).Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(ctx context.Context, c clusters.Cluster) {
		// The Config reaches the cluster: read its default namespace.
		dyn, err := dynamic.NewForConfig(c.Config)
		if err == nil {
			_, err = dyn.Resource(namespacesGVR).Get(ctx, "default", metav1.GetOptions{})
		}
		h.events <- event{"start", c, err}
		<-ctx.Done()
		h.events <- event{"stop", c, nil}
	}
	h.reg = clusters.New(h.dyn, ns, "local", run, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- h.reg.Run(ctx) }()
	return h, done
}

// next is the next reader started or stopped.
func (h *hub) next() event {
	h.t.Helper()
	select {
	case e := <-h.events:
		return e
	case <-time.After(30 * time.Second):
		h.t.Fatal("no reader started or stopped within 30 s")
		return event{}
	}
}

// expect checks the next event: what, of which cluster, registered by
// which Secret.
func (h *hub) expect(what, name, secret string) event {
	h.t.Helper()
	e := h.next()
	if e.what != what || e.c.Name != name || e.c.Secret != secret || e.err != nil {
		h.t.Fatalf("%s %s (Secret %s, err %v), want %s %s from %s", e.what, e.c.Name, e.c.Secret, e.err, what, name, secret)
	}
	return e
}

// put creates or replaces a Secret.
func (h *hub) put(ns, name string, labels map[string]string, annotations map[string]string, data map[string]string) {
	h.t.Helper()
	md := map[string]any{"name": name, "namespace": ns}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		md["labels"] = l
	}
	if annotations != nil {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		md["annotations"] = a
	}
	sd := map[string]any{}
	for k, v := range data {
		sd[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": md, "stringData": sd}}
	ctx := context.Background()
	res := h.dyn.Resource(secretsGVR).Namespace(ns)
	old, err := res.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		// An update replaces the Secret: its data is what stringData says.
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = res.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *hub) remove(ns, name string) {
	h.t.Helper()
	if err := h.dyn.Resource(secretsGVR).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// stateOf polls the registry's states until one of Secret secret
// satisfies ok.
func (h *hub) stateOf(secret string, ok func(clusters.State) bool) clusters.State {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range h.reg.States() {
			if s.Secret == secret && ok(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("Secret %s: states %+v", secret, h.reg.States())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRegisteredClusters: on two real kube-apiservers (the hub's own and a
// remote one), clusters registered as labelled Secrets in the service's
// namespace are read with their kubeconfig, with their environment; a
// rotated kubeconfig restarts the reader, a change of anything else does
// not; a broken kubeconfig, a name registered twice and the local
// cluster's name are each said for their Secret, without its contents;
// Secrets of other namespaces are not read; deleting the first Secret of
// a name hands the cluster to the second; the end stops every reader.
func TestRegisteredClusters(t *testing.T) {
	hubCluster, remote := clustertest.Start(t), clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, done := startHub(t, ctx, hubCluster, "fdn")
	remoteConfig := readFile(t, remote.Kubeconfig)
	label := func(name string) map[string]string { return map[string]string{clusters.ClusterLabel: name} }
	select {
	case <-h.reg.Synced(): // an empty namespace read
	case <-time.After(30 * time.Second):
		t.Fatal("the registry never synced")
	}

	h.put("fdn", "prod", map[string]string{clusters.ClusterLabel: "prod", clusters.EnvironmentLabel: "production"}, nil,
		map[string]string{"value": remoteConfig})
	first := h.expect("start", "prod", "fdn/prod")
	if first.c.Environment != "production" || first.c.Config.Host != remote.Config.Host {
		t.Fatalf("prod read in environment %q at %s, want production at %s", first.c.Environment, first.c.Config.Host, remote.Config.Host)
	}

	// A rotated kubeconfig (another client certificate): read again with it.
	rotatedConfig := readFile(t, remote.KubeconfigFor(t, "hub-rotated", "system:masters"))
	h.put("fdn", "prod", map[string]string{clusters.ClusterLabel: "prod", clusters.EnvironmentLabel: "production"}, nil,
		map[string]string{"value.yaml": rotatedConfig})
	h.expect("stop", "prod", "fdn/prod")
	rotated := h.expect("start", "prod", "fdn/prod")
	if string(rotated.c.Config.CertData) == string(first.c.Config.CertData) {
		t.Fatal("the reader restarted with the old certificate")
	}

	// An annotation is not a rotation: the next reader to start is
	// staging's, with prod's still running.
	h.put("fdn", "prod", map[string]string{clusters.ClusterLabel: "prod", clusters.EnvironmentLabel: "production"},
		map[string]string{"note": "touched"}, map[string]string{"value.yaml": rotatedConfig})
	h.put("fdn", "staging", label("staging"), nil, map[string]string{"value": remoteConfig})
	h.expect("start", "staging", "fdn/staging")

	// Refused, each for its own Secret, and nothing started for them.
	h.put("fdn", "qa", label("qa"), nil, map[string]string{"value": "clusters: [token: " + secretToken})
	h.put("fdn", "prod-2", label("prod"), nil, map[string]string{"value": remoteConfig})
	h.put("fdn", "self", label("local"), nil, map[string]string{"value": remoteConfig})
	h.put("elsewhere", "dev", label("dev"), nil, map[string]string{"value": remoteConfig})
	for secret, want := range map[string]string{
		"fdn/qa":     "the kubeconfig does not parse",
		"fdn/prod-2": `cluster "prod" is registered by Secret fdn/prod already`,
		"fdn/self":   `cluster "local" is the one the service runs in`,
	} {
		s := h.stateOf(secret, func(s clusters.State) bool { return s.Err != "" })
		if !strings.Contains(s.Err, want) || strings.Contains(s.Err, secretToken) {
			t.Errorf("Secret %s: %q, want it to say %q without the Secret's contents", secret, s.Err, want)
		}
	}
	if i := slices.IndexFunc(h.reg.States(), func(s clusters.State) bool { return s.Secret == "elsewhere/dev" }); i >= 0 {
		t.Error("a Secret of another namespace was read")
	}
	// A refused Secret still registers its name (it may be mended).
	for name, want := range map[string]bool{"prod": true, "staging": true, "qa": true, "dev": false, "gone": false} {
		if got := h.reg.Registered(name); got != want {
			t.Errorf("Registered(%q) = %v, want %v", name, got, want)
		}
	}

	// The first Secret of prod deleted: prod is read through the second.
	h.remove("fdn", "prod")
	h.expect("stop", "prod", "fdn/prod")
	h.expect("start", "prod", "fdn/prod-2")
	if s := h.stateOf("fdn/prod-2", func(clusters.State) bool { return true }); s.Err != "" {
		t.Fatalf("prod-2 after prod's deletion: %q", s.Err)
	}
	h.remove("fdn", "prod-2")
	h.expect("stop", "prod", "fdn/prod-2")
	if h.reg.Registered("prod") {
		t.Error("prod still registered once both its Secrets went")
	}

	cancel()
	h.expect("stop", "staging", "fdn/staging")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

const secretToken = "s3cr3t-t0ken-in-a-broken-kubeconfig"
