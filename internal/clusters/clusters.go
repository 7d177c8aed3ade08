// Package clusters keeps the clusters a hub reads besides its own, each
// registered the Kubernetes way: a Secret in the service's namespace,
// labelled fluxdeploy.dev/cluster=<name>, holding a kubeconfig under the key
// value (or value.yaml), as Flux's kubeConfig.secretRef does. The label's
// value is the name the cluster's rollouts go by, the same as its Alert's
// eventMetadata.cluster. The Registry watches those Secrets and runs one
// reader per cluster: a cluster added is read within seconds, one removed
// stops being read, and a rotated kubeconfig restarts its reader with the
// new one. Reading the Secrets takes a namespaced Role on its own namespace,
// nothing cluster-wide.
package clusters

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The labels that register a cluster: its name, and its environment.
const (
	ClusterLabel     = "fluxdeploy.dev/cluster"
	EnvironmentLabel = "fluxdeploy.dev/environment"
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// Cluster is a registered cluster, as its Secret says.
type Cluster struct {
	Name        string // the name its rollouts go by
	Environment string // "" when the Secret names none
	Secret      string // namespace/name
	Config      *rest.Config
}

// RunFunc reads a cluster until ctx ends. It must return once ctx has
// ended: the Registry waits for it before it runs the cluster again with a
// new kubeconfig, and before its own Run returns.
type RunFunc func(ctx context.Context, c Cluster)

// State is what a registered cluster's Secret gave.
type State struct {
	Name        string // the label's value
	Environment string // its environment label's value, "" for none
	Secret      string // namespace/name
	// Err says why the Secret is not read (its kubeconfig, or another
	// Secret registering the same name); "" when its cluster is. It never
	// quotes the Secret's contents.
	Err string
}

// Registry runs a reader for each cluster registered in its namespace.
type Registry struct {
	dyn   dynamic.Interface
	ns    string
	local string // the cluster the service runs in: no Secret may take its name
	run   RunFunc
	log   *slog.Logger

	changed chan struct{}      // a Secret came, changed or went
	running map[string]*runner // by cluster name; Run's alone
	synced  chan struct{}      // closed once every Secret was read

	mu     sync.Mutex // guards states, which readers of /readyz ask for
	states []State    // by Secret, as last reconciled
}

// runner is a cluster being read.
type runner struct {
	c      Cluster
	sum    [sha256.Size]byte // of its kubeconfig: a change is a rotation
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a registry of the clusters registered in namespace ns,
// read through dyn (the service's own cluster). local is the name of the
// cluster the service runs in ("" when it reads none). Run starts it.
func New(dyn dynamic.Interface, ns, local string, run RunFunc, log *slog.Logger) *Registry {
	return &Registry{dyn: dyn, ns: ns, local: local, run: run, log: log,
		changed: make(chan struct{}, 1), running: map[string]*runner{}, synced: make(chan struct{})}
}

// Synced is closed once the registry has read every Secret there was
// when it started: from then on, a name it does not know is registered
// nowhere.
func (r *Registry) Synced() <-chan struct{} { return r.synced }

// Registered says whether a Secret registers cluster, read or not (a
// kubeconfig that does not parse may be mended).
func (r *Registry) Registered(cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.states, func(s State) bool { return s.Name == cluster })
}

// Run watches the Secrets until ctx ends, then stops every reader and
// waits for them.
func (r *Registry) Run(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.dyn, 0, r.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = ClusterLabel
	})
	inf := f.ForResource(secrets).Informer()
	// The cache keeps what the registry reads: labels and data.
	if err := inf.SetTransform(slim); err != nil {
		return err
	}
	notify := func(any) {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify,
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	defer r.stopAll()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // ctx ended
	}
	for first := true; ; first = false {
		r.reconcile(ctx, inf.GetStore().List())
		if first {
			close(r.synced)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.changed:
		}
	}
}

// States lists the registered Secrets, by Secret.
func (r *Registry) States() []State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// slim keeps of a Secret its name, labels and data.
func slim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	md := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()}
	if l := u.GetLabels(); l != nil {
		labels := make(map[string]any, len(l))
		for k, v := range l {
			labels[k] = v
		}
		md["labels"] = labels
	}
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": md}}
	if d, ok := u.Object["data"]; ok {
		out.Object["data"] = d
	}
	return out, nil
}

// wanted is a Secret's cluster, or why it is not read.
type wanted struct {
	c   Cluster
	sum [sha256.Size]byte
	err string
}

// reconcile brings the readers to what the Secrets say.
func (r *Registry) reconcile(ctx context.Context, objs []any) {
	var found []wanted
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		found = append(found, r.read(u))
	}
	// By Secret: of two Secrets registering one name, the first by
	// namespace and name is read (not the older: the choice must be the
	// same on every replica and after every restart); one that cannot be
	// read does not take the name.
	slices.SortFunc(found, func(a, b wanted) int {
		switch {
		case a.c.Secret < b.c.Secret:
			return -1
		case a.c.Secret > b.c.Secret:
			return 1
		}
		return 0
	})
	want := map[string]wanted{}
	states := make([]State, 0, len(found))
	for _, w := range found {
		if first, ok := want[w.c.Name]; ok && w.err == "" {
			w.err = fmt.Sprintf("cluster %q is registered by Secret %s already: this one is not read", w.c.Name, first.c.Secret)
		}
		if w.err == "" {
			want[w.c.Name] = w
		}
		states = append(states, State{Name: w.c.Name, Environment: w.c.Environment, Secret: w.c.Secret, Err: w.err})
	}
	r.mu.Lock()
	r.states = states
	r.mu.Unlock()
	var stale []string
	for name, run := range r.running {
		if w, ok := want[name]; !ok || w.sum != run.sum || w.c.Environment != run.c.Environment || w.c.Secret != run.c.Secret {
			stale = append(stale, name)
		}
	}
	r.stop(stale...)
	for name, w := range want {
		if _, ok := r.running[name]; !ok {
			r.start(ctx, w)
		}
	}
}

// read is what Secret u registers.
func (r *Registry) read(u *unstructured.Unstructured) wanted {
	w := wanted{c: Cluster{Name: u.GetLabels()[ClusterLabel], Environment: u.GetLabels()[EnvironmentLabel],
		Secret: u.GetNamespace() + "/" + u.GetName()}}
	switch {
	case w.c.Name == "":
		w.err = "the label " + ClusterLabel + " is empty: it names the cluster"
		return w
	case w.c.Name == r.local:
		w.err = fmt.Sprintf("cluster %q is the one the service runs in", w.c.Name)
		return w
	}
	var s corev1.Secret
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		w.err = "the Secret's data does not read as a Secret's"
		return w
	}
	cfg, sum, err := restConfig(s.Data)
	if err != nil {
		w.err = err.Error()
		return w
	}
	cfg.UserAgent = "flux-deploy-notifier"
	w.c.Config, w.sum = cfg, sum
	return w
}

func (r *Registry) start(ctx context.Context, w wanted) {
	ctx, cancel := context.WithCancel(ctx)
	run := &runner{c: w.c, sum: w.sum, cancel: cancel, done: make(chan struct{})}
	r.running[w.c.Name] = run
	r.log.Info("reading a registered cluster", "cluster", w.c.Name, "secret", w.c.Secret, "environment", w.c.Environment)
	go func() {
		defer close(run.done)
		r.run(ctx, run.c)
	}()
}

// stop stops clusters' readers, together, and waits for them.
func (r *Registry) stop(names ...string) {
	runs := make([]*runner, 0, len(names))
	for _, name := range names {
		run := r.running[name]
		delete(r.running, name)
		run.cancel()
		runs = append(runs, run)
	}
	for _, run := range runs {
		<-run.done
		r.log.Info("stopped reading a registered cluster", "cluster", run.c.Name, "secret", run.c.Secret)
	}
}

func (r *Registry) stopAll() {
	r.stop(slices.Collect(maps.Keys(r.running))...)
}

// Rules is what the registry needs in its namespace: get, list and watch
// on Secrets (RBAC cannot narrow a list to the labelled ones; the
// namespace is the service's own, whose Secrets it reads anyway). The
// install's Role grants exactly these.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}
}

// CheckAccess lists the registered Secrets once: a missing permission is
// said now (the informer would retry it in the background forever).
func (r *Registry) CheckAccess(ctx context.Context) error {
	_, err := r.dyn.Resource(secrets).Namespace(r.ns).List(ctx, metav1.ListOptions{LabelSelector: ClusterLabel, Limit: 1})
	return err
}
