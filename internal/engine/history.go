package engine

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// HistoryDepth is how many settled rollouts of each cluster the reader
// keeps for Histories, besides the live ones.
const HistoryDepth = 50

// histories keeps each cluster's latest settled rollouts, slimmed, for
// "what runs where" (internal/environments): read from the archive once,
// then kept as rollouts settle, so that a read of every cluster costs no
// archive scan. The archive has no index by cluster: a scan of one
// cluster's walks every cluster's, so the one load walks them all at
// once, newest first, until each cluster has HistoryDepth.
type histories struct {
	// pmu guards what publish hands over: the views removed from the
	// snapshot since the last read, which settled or were collected.
	// Taken inside the snapshot's lock; never held across I/O.
	pmu      sync.Mutex
	tracking atomic.Bool // a read began: removals and changes are kept for the next one
	removed  []*rollout.View
	changed  map[string]bool // the clusters whose views changed
	stale    bool            // a replace, or too many removals kept: load again

	// mu serializes reads, which may read the archive.
	mu sync.Mutex
	of map[string]*settledHistory
	// merged is each cluster's history as the last read gave it: a read
	// makes again those of the clusters that changed since, alone (an
	// event changes one cluster's; a hub has hundreds). nil until the
	// archive was read (or after it could not be).
	merged map[string]environments.History
}

type settledHistory struct {
	views []*rollout.View // newest first (rollout.NewestFirst), at most HistoryDepth
	cut   bool            // older ones were left out
}

// gone is told, under the snapshot's lock, of a rollout leaving it, by
// its last view. One never shown (a source's revision no layer read) was
// never archived either: the model archives views.
func (h *histories) gone(old *rollout.View) {
	if old == nil {
		return
	}
	h.pmu.Lock()
	defer h.pmu.Unlock()
	switch {
	case !h.tracking.Load() || h.stale:
	case len(h.removed) == maxRemoved:
		// Nobody read for long: the next read loads again, rather than
		// keep what settled meanwhile here without bound.
		h.stale, h.removed = true, nil
	default:
		h.removed = append(h.removed, old)
	}
}

// maxRemoved bounds the removals kept between two reads.
const maxRemoved = 4096

// reset is told of a replace: every view shown again.
func (h *histories) reset() {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	h.stale, h.removed = true, nil
}

// touched is told, under the snapshot's lock, of a publish: the clusters
// of its views and removals changed. Nothing is kept before the first
// read: the engine's commits (an event's acknowledgement waits for one)
// pay for it only once /environments is read.
func (h *histories) touched(views []*rollout.View, removed []rollout.Key) {
	if len(views)+len(removed) == 0 || !h.tracking.Load() {
		return
	}
	h.pmu.Lock()
	defer h.pmu.Unlock()
	if h.changed == nil {
		h.changed = map[string]bool{}
	}
	for _, v := range views {
		h.changed[v.Cluster] = true
	}
	for _, k := range removed {
		h.changed[k.Cluster] = true
	}
}

// take hands over the removals and changes kept; from the first call on,
// they are kept.
func (h *histories) take() (removed []*rollout.View, changed map[string]bool, stale bool) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	removed, changed, stale = h.removed, h.changed, h.stale
	h.removed, h.changed, h.stale = nil, nil, false
	h.tracking.Store(true)
	return removed, changed, stale
}

// slim is v without what "what runs where" never reads: its layers, and
// its failures' objects and messages.
func slim(v *rollout.View) *rollout.View {
	s := *v
	s.Layers = rollout.Layers{}
	s.Behind = nil
	s.Failures = make([]rollout.FailureView, len(v.Failures))
	for i, f := range v.Failures {
		f.Objects, f.Message, f.Remediation = nil, "", ""
		s.Failures[i] = f
	}
	return &s
}

// Histories returns every cluster's rollouts, newest first: the live ones
// and up to HistoryDepth settled ones. It fails only when the archive
// cannot be read. The map is the caller's; the histories are shared, not
// to be changed.
func (r *Reader) Histories() (map[string]environments.History, error) {
	s, h := r.snap, &r.snap.hist
	// h.mu first: a read waiting for another's archive read must not hold
	// the snapshot's lock, which the engine's publish waits for. The live
	// views and what changed are taken together: a rollout that settles
	// meanwhile is in one or the other (or both: the live view is kept).
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.RLock()
	removed, changed, stale := h.take()
	whole := stale || h.merged == nil
	live := map[string][]*rollout.View{}
	for k, v := range s.views {
		if whole || changed[k.Cluster] {
			live[k.Cluster] = append(live[k.Cluster], v)
		}
	}
	s.mu.RUnlock()

	switch {
	case whole:
		if err := h.load(r.archive); err != nil {
			h.merged = nil
			return nil, err
		}
	case len(removed) > 0:
		if err := h.settle(r.archive, removed); err != nil {
			// Read again at the next call, whole.
			h.merged = nil
			return nil, err
		}
	}
	if whole {
		h.merged = make(map[string]environments.History, len(h.of))
		changed = map[string]bool{}
		for c := range live {
			changed[c] = true
		}
		for c := range h.of {
			changed[c] = true
		}
	}
	for c := range changed {
		views := live[c]
		slices.SortFunc(views, rollout.NewestFirst)
		hist := environments.History{Rollouts: views}
		if sh := h.of[c]; sh != nil {
			hist = environments.History{Rollouts: merge(views, sh.views), Cut: sh.cut}
		}
		if len(hist.Rollouts) == 0 {
			delete(h.merged, c)
			continue
		}
		h.merged[c] = hist
	}
	return maps.Clone(h.merged), nil
}

// merge is one cluster's live and settled rollouts, both newest first,
// in that order; a settled view of a rollout still live (it settled
// after the live ones were read) is left out. A cluster has few live ones.
func merge(live, settled []*rollout.View) []*rollout.View {
	out := make([]*rollout.View, 0, len(live)+len(settled))
	i := 0
	for _, v := range settled {
		if len(live) > 0 && slices.ContainsFunc(live, func(l *rollout.View) bool { return l.FirstSeen.Equal(v.FirstSeen) && l.Hash == v.Hash }) {
			continue
		}
		for ; i < len(live) && rollout.NewestFirst(live[i], v) < 0; i++ {
			out = append(out, live[i])
		}
		out = append(out, v)
	}
	return append(out, live[i:]...)
}

// load reads each cluster's latest settled rollouts from the archive, in
// one scan of every cluster's, newest first.
func (h *histories) load(a Archive) error {
	clusters, err := a.SettledClusters()
	if err != nil {
		return err
	}
	of := make(map[string]*settledHistory, len(clusters))
	full := 0
	err = a.ScanSettled("", time.Time{}, func(v *rollout.View) bool {
		sh := of[v.Cluster]
		if sh == nil {
			sh = &settledHistory{}
			of[v.Cluster] = sh
		}
		if len(sh.views) == HistoryDepth {
			sh.cut = true
			return true
		}
		sh.views = append(sh.views, slim(v))
		if len(sh.views) == HistoryDepth {
			if full++; full >= len(clusters) {
				// Every cluster has its depth: what is older is cut.
				for _, o := range of {
					o.cut = true
				}
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, sh := range of {
		// The archive's scan is by first evidence alone.
		slices.SortStableFunc(sh.views, rollout.NewestFirst)
	}
	h.of = of
	return nil
}

// settle adds the removed rollouts the archive holds (settled, not
// collected) to their clusters' histories.
func (h *histories) settle(a Archive, removed []*rollout.View) error {
	keys := make([]rollout.Key, len(removed))
	for i, v := range removed {
		keys[i] = v.Key()
	}
	settled, err := a.SettledAmong(keys)
	if err != nil {
		return err
	}
	for _, v := range removed {
		if !settled[v.Key()] {
			continue // collected: gone from both
		}
		sh := h.of[v.Cluster]
		if sh == nil {
			sh = &settledHistory{}
			h.of[v.Cluster] = sh
		}
		if slices.ContainsFunc(sh.views, func(o *rollout.View) bool { return o.Key() == v.Key() }) {
			continue // read by the load already
		}
		i, _ := slices.BinarySearchFunc(sh.views, v, rollout.NewestFirst)
		sh.views = slices.Insert(sh.views, i, slim(v))
		if len(sh.views) > HistoryDepth {
			sh.views, sh.cut = sh.views[:HistoryDepth], true
		}
	}
	return nil
}
