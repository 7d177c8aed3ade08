package engine

import (
	"slices"
	"sync"
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
	tracking bool // a read began: removals are kept for the next one
	removed  []*rollout.View
	stale    bool // a replace, or too many removals kept: load again

	// mu serializes reads, which may read the archive.
	mu     sync.Mutex
	loaded bool
	of     map[string]*settledHistory
}

type settledHistory struct {
	views []*rollout.View // newest first (compareListed), at most HistoryDepth
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
	case !h.tracking || h.stale:
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

// take hands over the removals kept; from the first on, removals are kept.
func (h *histories) take() (removed []*rollout.View, stale bool) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	removed, stale = h.removed, h.stale
	h.removed, h.stale, h.tracking = nil, false, true
	return removed, stale
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
// cannot be read.
func (r *Reader) Histories() (map[string]environments.History, error) {
	s, h := r.snap, &r.snap.hist
	// The live views and the removals are taken together: a rollout that
	// settles meanwhile is in one or the other (or both: the live view
	// is then the one kept).
	s.mu.RLock()
	live := map[string][]*rollout.View{}
	for k, v := range s.views {
		live[k.Cluster] = append(live[k.Cluster], v)
	}
	removed, stale := h.take()
	s.mu.RUnlock()

	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.loaded || stale:
		if err := h.load(r.archive); err != nil {
			return nil, err
		}
	case len(removed) > 0:
		if err := h.settle(r.archive, removed); err != nil {
			// Read again at the next call, whole.
			h.loaded = false
			return nil, err
		}
	}
	out := make(map[string]environments.History, len(live)+len(h.of))
	for c, views := range live {
		slices.SortFunc(views, compareListed)
		out[c] = environments.History{Rollouts: views}
	}
	for c, sh := range h.of {
		out[c] = environments.History{Rollouts: merge(out[c].Rollouts, sh.views), Cut: sh.cut}
	}
	return out, nil
}

// merge is one cluster's live and settled rollouts, both in the list's
// order, in that order; a settled view of a rollout still live (it settled
// after the live ones were read) is left out. A cluster has few live ones.
func merge(live, settled []*rollout.View) []*rollout.View {
	out := make([]*rollout.View, 0, len(live)+len(settled))
	i := 0
	for _, v := range settled {
		if len(live) > 0 && slices.ContainsFunc(live, func(l *rollout.View) bool { return l.FirstSeen.Equal(v.FirstSeen) && l.Hash == v.Hash }) {
			continue
		}
		for ; i < len(live) && compareListed(live[i], v) < 0; i++ {
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
	h.of, h.loaded = of, true
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
		i, _ := slices.BinarySearchFunc(sh.views, v, compareListed)
		sh.views = slices.Insert(sh.views, i, slim(v))
		if len(sh.views) > HistoryDepth {
			sh.views, sh.cut = sh.views[:HistoryDepth], true
		}
	}
	return nil
}
