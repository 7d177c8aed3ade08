package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/episode"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Submitter stores observations that belong together in one batch: the
// engine.
type Submitter interface {
	SubmitAll(ctx context.Context, obs []rollout.Observation) error
}

// Config configures the reader.
type Config struct {
	Cluster       string   // the name rollouts of this cluster go by
	Namespaces    []string // empty: all
	LayerSelector string   // label selector on Kustomizations
	SyncTimeout   time.Duration
	// StatusMoved, when set, is called whenever a layer's status changes:
	// the silence watchdog's sign that Flux is reconciling.
	StatusMoved func()
	// AccessEvery is how often the reader checks, while it runs, that it
	// may still read what it reads (default 30 s: a permission withdrawn
	// or a token expired is told within a minute).
	AccessEvery time.Duration
}

// Reader watches Kustomizations, their sources and the HelmReleases they
// apply.
type Reader struct {
	dyn dynamic.Interface
	// Kustomizations' and HelmReleases' clients, decoded slim (wire.go).
	layerC, releaseC *wireClient
	sub              Submitter
	cfg              Config
	log              *slog.Logger
	now              func() time.Time
	synced           atomic.Bool
	// syncedIn is how long its caches took to sync, in nanoseconds, once
	// they have.
	syncedIn atomic.Int64

	// Set up before the informers start; then used by Run's loop alone.
	layers   []cache.GenericLister
	bySource []cache.Indexer                  // Kustomizations, indexed by sourceRef
	srcs     map[string][]cache.GenericLister // by kind
	marked   map[string]string                // layer -> last membership mark stored, to send changes only
	served   map[string]bool                  // source kinds this cluster serves (CheckAccess)
	releases []cache.Indexer                  // HelmReleases (*release), indexed by owner layer; none when not read
	// readReleases: CheckAccess found HelmReleases served and readable.
	readReleases bool
	// The objects to look at, while Run runs. A burst of changes to one
	// object is looked at once; a look whose observations could not be
	// stored is retried with backoff, so nothing the cluster said is lost
	// to a store error.
	queue workqueue.TypedRateLimitingInterface[objectKey]
	// failing is the error of the last failed store, logged once until a
	// store succeeds again.
	failing string
	health  *apiHealth // NewForConfig's
	// lost is the periodic check's episode of access lost: a permission
	// withdrawn, credentials refused.
	lost episode.Tracker

	mu      sync.Mutex
	deleted map[objectKey]*kustomizev1.Kustomization // Kustomizations deleted, until looked at
}

// objectKey names an object the reader looks at.
type objectKey struct{ Kind, Namespace, Name string }

func (k objectKey) String() string { return k.Kind + "/" + k.Namespace + "/" + k.Name }

// sourceIndex indexes Kustomizations by their sourceRef, so that a source
// event finds its layers without scanning every Kustomization.
const sourceIndex = "sourceRef"

func indexBySource(obj any) ([]string, error) {
	if k, ok := obj.(*kustomizev1.Kustomization); ok {
		return []string{ingest.SourceOf(k).String()}, nil
	}
	return nil, nil
}

// ownerIndex indexes HelmReleases by the layer that applies them
// (namespace/name), so that a layer's change finds its releases.
const ownerIndex = "owner"

func indexByOwner(obj any) ([]string, error) {
	if r, ok := obj.(*release); ok && r.owner != "" {
		return []string{r.owner}, nil
	}
	return nil, nil
}

// newReader returns a reader; Run starts it.
func newReader(dyn dynamic.Interface, layerC, releaseC *wireClient, sub Submitter, cfg Config, log *slog.Logger, now func() time.Time) *Reader {
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 2 * time.Minute
	}
	if cfg.AccessEvery <= 0 {
		cfg.AccessEvery = 30 * time.Second
	}
	return &Reader{dyn: dyn, layerC: layerC, releaseC: releaseC, sub: sub, cfg: cfg, log: log, now: now,
		srcs: map[string][]cache.GenericLister{}, marked: map[string]string{}, deleted: map[objectKey]*kustomizev1.Kustomization{}}
}

// Synced reports whether the caches have synced (for /readyz).
func (r *Reader) Synced() bool { return r.synced.Load() }

// SyncedIn is how long its caches took to sync; false before they have.
func (r *Reader) SyncedIn() (time.Duration, bool) {
	return time.Duration(r.syncedIn.Load()), r.synced.Load()
}

// Up reports whether the cluster is read: caches synced, and requests to
// its API server succeeding.
func (r *Reader) Up() bool { return r.synced.Load() && r.Warning() == "" }

// CheckAccess lists each kind once, so that a missing permission is
// reported clearly at start instead of being retried in the background,
// and notes which source kinds the cluster serves. Call it before Run.
func (r *Reader) CheckAccess(ctx context.Context) error {
	a, err := r.probe(ctx)
	if err != nil {
		return err
	}
	for _, sk := range flux.SourceKinds() {
		if !a.served[sk.Kind] {
			r.log.Warn("source kind not served by this cluster", "resource", sk.Resource.Resource)
		}
	}
	// HelmReleases are read when the cluster serves them and the role
	// grants them; without, their events alone say how they went.
	switch {
	case a.releasesForbidden != nil:
		r.log.Warn("HelmReleases not read: their events alone say how they went", "err", a.releasesForbidden)
	case !a.readReleases:
		r.log.Info("HelmReleases not served by this cluster")
	}
	r.served, r.readReleases = a.served, a.readReleases
	return nil
}

// access is what a probe of the cluster found the reader may read.
type access struct {
	served       map[string]bool // source kinds the cluster serves
	readReleases bool            // HelmReleases served and readable
	// releasesForbidden is why listing HelmReleases was forbidden.
	releasesForbidden error
}

// forbidden is a refused list of resource in namespace ns, and what to
// grant.
func forbidden(resource, ns string, err error) error {
	return fmt.Errorf("cluster access: list %s in %s is forbidden: grant get, list and watch on it (see manifests/): %w", resource, nsName(ns), err)
}

// probeKey marks the probe's requests, whose failures it reports itself
// (apiHealth leaves them).
type probeKey struct{}

// probe lists one object of each kind the reader reads, in each of its
// namespaces, and says what it may read: an error names a kind it must
// read and may not (or a failing request). It changes nothing, so it may
// run beside Run.
func (r *Reader) probe(ctx context.Context) (access, error) {
	ctx = context.WithValue(ctx, probeKey{}, true)
	a := access{served: map[string]bool{}, readReleases: true}
	for _, sk := range flux.SourceKinds() {
		a.served[sk.Kind] = true
	}
	namespaces := r.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	kinds := append(flux.KindsOf(flux.Layer), flux.SourceKinds()...)
	for _, ns := range namespaces {
		for _, k := range kinds {
			g := k.Resource
			_, err := r.dyn.Resource(g).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
			switch {
			case apierrors.IsForbidden(err):
				return a, forbidden(g.Resource, ns, err)
			case apierrors.IsUnauthorized(err):
				return a, fmt.Errorf("cluster access: the API server refuses the credentials (401 Unauthorized: an expired or revoked token, or a certificate it does not trust): renew them: %w", err)
			case apierrors.IsNotFound(err) && k.Role == flux.Source:
				a.served[k.Kind] = false
			case err != nil:
				return a, fmt.Errorf("cluster access: list %s in %s: %w", g.Resource, nsName(ns), err)
			}
		}
	}
	for _, ns := range namespaces {
		_, err := r.dyn.Resource(flux.HelmReleases()).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case apierrors.IsForbidden(err):
			a.readReleases, a.releasesForbidden = false, forbidden(flux.HelmReleases().Resource, ns, err)
		case apierrors.IsNotFound(err):
			a.readReleases = false
		case err != nil:
			return a, fmt.Errorf("cluster access: list helmreleases in %s: %w", nsName(ns), err)
		}
	}
	return a, nil
}

// recheck probes the cluster every AccessEvery until ctx ends: the API
// server does not check a watch already open again, so a permission
// withdrawn or a token that expired would otherwise go unnoticed until
// the watch next ends. A lost permission (of what Run reads) or refused
// credentials are the reader's Warning, logged once until they are back.
func (r *Reader) recheck(ctx context.Context) {
	t := time.NewTicker(r.cfg.AccessEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		a, err := r.probe(probeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil && r.readReleases {
			err = a.releasesForbidden // read since the start: a loss
		}
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			if r.lost.Fail(r.now(), err.Error()) {
				r.log.Warn("cluster access lost; the cluster is not seen to change", "err", err)
			}
		case err == nil:
			if _, _, ended := r.lost.Ok(); ended {
				r.log.Info("cluster access back")
			}
		} // else not an access fault: apiHealth tells a failing API server
	}
}

func nsName(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// Run watches until ctx ends, or returns the error that stopped it. What
// it started ends with it: a reader that failed is dropped and another
// started in its place (a hub retries a registered cluster), which must
// not leave informers watching and a queue's goroutine behind it.
func (r *Reader) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[objectKey](),
		workqueue.TypedRateLimitingQueueConfig[objectKey]{Name: "cluster-reader"})
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	start := r.now()
	namespaces := r.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		layers, ok := r.inform(ctx, r.layerC.listWatch(ns, r.cfg.LayerSelector), &kustomizev1.Kustomization{},
			flux.KindKustomization, cache.Indexers{sourceIndex: indexBySource})
		// Not the dynamic listers, which assert unstructured objects: the
		// caches hold Flux's types.
		r.layers = append(r.layers, cache.NewGenericLister(layers, flux.Kustomizations().GroupResource()))
		r.bySource = append(r.bySource, layers)
		synced = append(synced, ok)
		for _, sk := range flux.SourceKinds() {
			if r.served != nil && !r.served[sk.Kind] {
				continue // an informer on a kind not served would never sync
			}
			srcs, ok := r.inform(ctx, r.dynamicListWatch(sk.Resource, ns), &unstructured.Unstructured{}, sk.Kind, cache.Indexers{})
			r.srcs[sk.Kind] = append(r.srcs[sk.Kind], cache.NewGenericLister(srcs, sk.Resource.GroupResource()))
			synced = append(synced, ok)
		}
		if r.readReleases {
			releases, ok := r.inform(ctx, r.releaseC.listWatch(ns, ""), &helmv2.HelmRelease{},
				flux.KindHelmRelease, cache.Indexers{ownerIndex: indexByOwner})
			r.releases = append(r.releases, releases)
			synced = append(synced, ok)
		}
	}
	syncCtx, cancel := context.WithTimeout(ctx, r.cfg.SyncTimeout)
	ok := cache.WaitForCacheSync(syncCtx.Done(), synced...)
	cancel()
	if !ok {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("cluster caches did not sync in time")
	}
	r.syncedIn.Store(int64(r.now().Sub(start)))
	r.synced.Store(true)
	r.log.Info("cluster caches synced")
	go r.recheck(ctx)
	for r.next(ctx) {
	}
	return nil
}

// next looks at one queued object; false once the queue is shut down.
func (r *Reader) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	err := r.handle(ctx, key)
	switch {
	case err == nil:
		r.queue.Forget(key)
		if r.failing != "" {
			r.log.Info("storing cluster observations again")
			r.failing = ""
		}
	case errors.Is(err, rollout.ErrInvalid):
		// A retry cannot pass the model's check: the object waits for its
		// next change.
		r.log.Error("cluster observation refused", "err", err, "object", key.String())
		r.queue.Forget(key)
	case ctx.Err() == nil:
		if msg := err.Error(); msg != r.failing {
			r.log.Warn("store cluster observations; retrying", "err", err, "object", key.String())
			r.failing = msg
		}
		r.queue.AddRateLimited(key)
	}
	return true
}

// inform caches the objects lw lists and watches, slimmed to what is read
// (slimLayer, slimRelease, slimSource), indexed by namespace and by
// indexers, and queues every change; it runs until ctx ends. Not a shared
// informer: nothing shares it, and the handler, called as each change is
// taken, needs no buffer of its own (a shared informer's listener keeps a
// ring of 1,024 notifications and two goroutines for each handler, seven
// a cluster: 46 MB of heap for a hub reading 500 clusters,
// docs/performance.md).
func (r *Reader) inform(ctx context.Context, lw cache.ListerWatcher, example runtime.Object, kind string, indexers cache.Indexers) (cache.Indexer, cache.InformerSynced) {
	indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: example, Indexers: indexers,
		Transform: r.slim(kind), Handler: r.handler(kind),
	})
	go informer.RunWithContext(ctx)
	return store.(cache.Indexer), informer.HasSynced
}

// dynamicListWatch lists and watches resource in namespace ns (all when
// "") through the dynamic client, as unstructured objects.
func (r *Reader) dynamicListWatch(resource schema.GroupVersionResource, ns string) cache.ListerWatcher {
	c := r.dyn.Resource(resource).Namespace(ns)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
}

// slim is the transform of kind's objects into what is cached.
func (r *Reader) slim(kind string) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *kustomizev1.Kustomization:
			return slimLayer(o), nil // decoded slim already (wire.go)
		case *helmv2.HelmRelease:
			return slimRelease(o), nil // likewise
		case *unstructured.Unstructured:
			src, err := slimSource(kind, o)
			if err != nil {
				// Cached by name alone: a source with no artifact,
				// until it changes.
				r.log.Error("read a Flux object", "err", err, "object", kind+"/"+o.GetNamespace()+"/"+o.GetName())
			}
			return src, nil
		}
		return obj, nil // slim already
	}
}

// handler queues every change of kind's objects; a layer's status moving
// is told at once (StatusMoved), a layer deleted kept until looked at.
func (r *Reader) handler(kind string) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			r.queue.Add(objectKey{kind, o.GetNamespace(), o.GetName()})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, obj any) {
			if kind == flux.KindKustomization && r.cfg.StatusMoved != nil && statusChanged(old, obj) {
				r.cfg.StatusMoved()
			}
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if kind != flux.KindKustomization {
				return
			}
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if k, ok := obj.(*kustomizev1.Kustomization); ok {
				key := objectKey{kind, k.Namespace, k.Name}
				r.mu.Lock()
				r.deleted[key] = k
				r.mu.Unlock()
				r.queue.Add(key)
			}
		},
	}
}

func statusChanged(old, obj any) bool {
	o, ok1 := old.(*kustomizev1.Kustomization)
	n, ok2 := obj.(*kustomizev1.Kustomization)
	return ok1 && ok2 && !reflect.DeepEqual(o.Status, n.Status)
}

// Layers counts the Kustomizations the reader sees.
func (r *Reader) Layers() int {
	if !r.Synced() {
		return 0
	}
	n := 0
	for _, l := range r.layers {
		objs, _ := l.List(labels.Everything())
		n += len(objs)
	}
	return n
}

// handle turns the current state of one object into observations, in one
// batch. Cached objects are never modified.
//
// A source's batch carries the membership marks of all its layers, so that
// no rollout is judged on part of its expected layers. A layer whose mark
// changed because its source moved is therefore looked at with its source,
// whatever order the informers delivered the changes in.
func (r *Reader) handle(ctx context.Context, key objectKey) error {
	var (
		obs   []rollout.Observation
		marks map[string]string
	)
	if key.Kind == flux.KindKustomization {
		r.mu.Lock()
		gone := r.deleted[key]
		r.mu.Unlock()
		var err error
		switch k := r.layer(key.Namespace, key.Name); {
		case k != nil && r.sourceMoved(k):
			err = r.handleSource(ctx, ingest.SourceOf(k))
		case k != nil:
			obs, marks = r.look(k, nil, nil)
			err = r.submit(ctx, obs, marks)
		case gone != nil:
			// A deleted layer stops being expected, like a suspended one.
			obs, marks = r.mark(gone, true, nil, nil)
			err = r.submit(ctx, obs, marks)
		}
		// The deletion is forgotten once what it says is stored, not
		// before: a retry must still find it.
		if err == nil && gone != nil {
			r.mu.Lock()
			if r.deleted[key] == gone {
				delete(r.deleted, key)
			}
			r.mu.Unlock()
		}
		return err
	}
	if key.Kind == flux.KindHelmRelease {
		return r.handleRelease(ctx, key.Namespace, key.Name)
	}
	return r.handleSource(ctx, ingest.Emitter(key.Kind, key.Namespace, key.Name))
}

// handleRelease submits what a HelmRelease's status says, with, in the
// same batch, the hold its layer's apply made of it when the layer's
// history tells it (the layer's own event may never come).
func (r *Reader) handleRelease(ctx context.Context, ns, name string) error {
	hr := r.release(ns, name)
	if hr == nil {
		return nil
	}
	var k *kustomizev1.Kustomization
	if lns, lname, ok := ingest.Owner(hr); ok {
		k = r.layer(lns, lname)
	}
	return r.submit(ctx, r.releaseObservations(hr, k, nil), nil)
}

// releaseObservations appends what the cluster says of a HelmRelease that
// layer k (nil: not cached) applies: the hold k's history tells, and its
// status.
func (r *Reader) releaseObservations(hr *helmv2.HelmRelease, k *kustomizev1.Kustomization, obs []rollout.Observation) []rollout.Observation {
	if k != nil {
		if o, ok := ingest.ReleaseHold(hr, k, r.cfg.Cluster); ok {
			obs = append(obs, o)
		}
	}
	var chart sourcev1.Source
	if em, ok := ingest.ChartSource(hr); ok {
		chart = r.source(em.Kind, em.Namespace, em.Name)
	}
	return append(obs, ingest.ReleaseStatus(hr, r.cfg.Cluster, chart)...)
}

// handleSource submits a source's artifact and, in the same batch, every
// layer on it: the source moved, so each is expected to follow.
func (r *Reader) handleSource(ctx context.Context, em rollout.Emitter) error {
	var (
		obs   []rollout.Observation
		marks map[string]string
	)
	if src := r.source(em.Kind, em.Namespace, em.Name); src != nil {
		if o, ok := ingest.Artifact(src, r.cfg.Cluster, em); ok {
			obs = append(obs, o)
		}
	}
	for _, idx := range r.bySource {
		objs, err := idx.ByIndex(sourceIndex, em.String())
		if err != nil {
			return fmt.Errorf("list the layers of %s: %w", em, err)
		}
		for _, o := range objs {
			if k, ok := o.(*kustomizev1.Kustomization); ok {
				obs, marks = r.look(k, obs, marks)
			}
		}
	}
	return r.submit(ctx, obs, marks)
}

// sourceMoved reports whether the revision of a layer's source is not the
// one its last stored membership mark was for.
func (r *Reader) sourceMoved(k *kustomizev1.Kustomization) bool {
	h, err := flux.ParseRevision(r.current(k))
	if err != nil {
		return false
	}
	hash, _, _ := strings.Cut(r.marked[k.Namespace+"/"+k.Name], " ")
	return hash != h.Hash
}

func (r *Reader) submit(ctx context.Context, obs []rollout.Observation, marks map[string]string) error {
	if len(obs) == 0 {
		return nil
	}
	if err := r.sub.SubmitAll(ctx, obs); err != nil {
		return err
	}
	maps.Copy(r.marked, marks)
	return nil
}

// look appends a Kustomization's membership mark for its source's current
// revision (when it changed since last stored), then its progress, then
// what the cluster says of the HelmReleases it applies: in the batch of
// the layer's success, so that the success is never judged without the
// releases the apply changed (its history tells which).
func (r *Reader) look(k *kustomizev1.Kustomization, obs []rollout.Observation, marks map[string]string) ([]rollout.Observation, map[string]string) {
	from := len(obs)
	obs, marks = r.mark(k, false, obs, marks)
	obs = append(obs, ingest.Status(k, r.cfg.Cluster, r.current(k))...)
	if attempted, err := flux.ParseRevision(k.Status.LastAttemptedRevision); err == nil {
		obs = r.withOrigin(k, attempted.Hash, obs)
	}
	var owned []*helmv2.HelmRelease
	for _, idx := range r.releases {
		objs, _ := idx.ByIndex(ownerIndex, k.Namespace+"/"+k.Name) // the index is registered before the informers start
		for _, o := range objs {
			if rel, ok := o.(*release); ok {
				owned = append(owned, rel.helmRelease())
			}
		}
	}
	// Every revision the layer reaches changes a release that follows its
	// source (the chart is built from it): held from the layer's first
	// word of it, the mark that its source moved. Not the revisions of
	// its history before, which the release may never have followed.
	var now map[string]bool
	for _, hr := range owned {
		if !ingest.Follows(hr, k) {
			continue
		}
		if now == nil {
			now = map[string]bool{}
			for _, rev := range []string{r.current(k), k.Status.LastAttemptedRevision, k.Status.LastAppliedRevision} {
				if h, err := flux.ParseRevision(rev); err == nil {
					now[h.Hash] = true
				}
			}
		}
		for i := from; i < len(obs); i++ {
			if now[obs[i].Hash] {
				obs[i].Holds = append(obs[i].Holds, ingest.Emitter(flux.KindHelmRelease, hr.Namespace, hr.Name))
			}
		}
	}
	for _, hr := range owned {
		obs = r.releaseObservations(hr, k, obs)
	}
	return obs, marks
}

// current is the revision of a Kustomization's source's artifact, or "".
func (r *Reader) current(k *kustomizev1.Kustomization) string {
	ref := ingest.SourceOf(k)
	if src := r.source(ref.Kind, ref.Namespace, ref.Name); src != nil {
		rev, _ := ingest.ArtifactRevision(src)
		return rev
	}
	return ""
}

// mark appends a layer's membership mark for its source's current revision
// when it changed since last stored.
func (r *Reader) mark(k *kustomizev1.Kustomization, gone bool, obs []rollout.Observation, marks map[string]string) ([]rollout.Observation, map[string]string) {
	if o, ok := ingest.Membership(k, gone, r.cfg.Cluster, r.current(k), r.now()); ok {
		id := o.Emitter.Layer()
		if mark := o.Hash + " " + o.Signal.String() + " " + strings.Join(o.DependsOn, ","); r.marked[id] != mark {
			obs = r.withOrigin(k, o.Hash, append(obs, o))
			if marks == nil {
				marks = map[string]string{}
			}
			marks[id] = mark
		}
	}
	return obs, marks
}

// withOrigin puts in the batch, once, the word of a layer's OCI source on
// its artifact of hash with the commit the artifact was built from (its
// org.opencontainers.image.revision), when the batch has a report of the
// layer on hash: the rollout is named by its commit from its first
// evidence on (its applying mail), whichever watch reported first. The
// source is read from the cache, or, when the cache has not reached hash
// (kustomize-controller read the source before this reader's watch said
// so), once from the kube-apiserver. Nothing for other sources, whose
// artifacts name no commit but their own.
func (r *Reader) withOrigin(k *kustomizev1.Kustomization, hash string, obs []rollout.Observation) []rollout.Observation {
	ref := ingest.SourceOf(k)
	sk, _ := flux.KindOf(ref.Kind)
	reported := func(em rollout.Emitter) bool {
		return slices.ContainsFunc(obs, func(o rollout.Observation) bool { return o.Emitter == em && o.Hash == hash })
	}
	if !slices.Contains(sk.ArtifactMetadata, flux.OCIRevisionMetadata) || !reported(ingest.Layer(k.Namespace, k.Name)) || reported(ref) {
		return obs
	}
	src := r.source(ref.Kind, ref.Namespace, ref.Name)
	if rev, _ := flux.ParseRevision(r.current(k)); rev.Hash != hash {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u, err := r.dyn.Resource(sk.Resource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return obs // the source's own watch brings it
		}
		if src, err = slimSource(ref.Kind, u); err != nil {
			return obs
		}
	}
	if src == nil {
		return obs
	}
	if a, ok := ingest.Artifact(src, r.cfg.Cluster, ref); ok && a.Hash == hash && a.OriginHash != "" {
		obs = append(obs, a)
	}
	return obs
}

// layer is the cached Kustomization ns/name, or nil.
func (r *Reader) layer(ns, name string) *kustomizev1.Kustomization {
	k, _ := get(r.layers, ns, name).(*kustomizev1.Kustomization)
	return k
}

// release is the cached HelmRelease ns/name, or nil.
func (r *Reader) release(ns, name string) *helmv2.HelmRelease {
	for _, idx := range r.releases {
		if o, ok, _ := idx.GetByKey(ns + "/" + name); ok {
			if rel, ok := o.(*release); ok {
				return rel.helmRelease()
			}
		}
	}
	return nil
}

// SourceURL is the repository a source names, as the cache holds it: a
// GitRepository's spec.url, an OCI artifact's source annotation. False
// until the caches synced, or when the source is not read.
func (r *Reader) SourceURL(kind, ns, name string) (string, bool) {
	if !r.synced.Load() { // the listers are set up before
		return "", false
	}
	k, _ := flux.KindOf(kind)
	src := r.source(kind, ns, name)
	if k.Repository == nil || src == nil {
		return "", false
	}
	return k.Repository(src)
}

// source is the cached source of kind ns/name, or nil.
func (r *Reader) source(kind, ns, name string) sourcev1.Source {
	src, _ := get(r.srcs[kind], ns, name).(sourcev1.Source)
	return src
}

func get(listers []cache.GenericLister, ns, name string) runtime.Object {
	for _, l := range listers {
		if o, err := l.ByNamespace(ns).Get(name); err == nil {
			return o
		}
	}
	return nil
}
