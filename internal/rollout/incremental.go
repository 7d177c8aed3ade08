package rollout

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// The engine does not evaluate a rollout afresh on every batch: a revision
// rolling across a thousand layers would cost a thousand layers per event.
// It keeps each rollout's last evaluation (its expected layers, what it
// replaced, one slot per expected layer, and what the slots add up to,
// tally.go) and, from what the batch changed, reads again only the slots
// whose inputs changed, updating the tally with each; the next view copies
// the chunks of layers those slots are in and takes the rest from the
// tally, so its cost does not grow with the rollout's width. A change to
// what a rollout expects (a revision that starts or stops being one it
// replaced, a membership mark, its own entry that moved in a log) rebuilds
// it. What a batch marks is bounded by what it changed too, not by how
// many rollouts are live: a revision stamped among older ones (a late
// report) marks the few that began about when it did, not every one after
// it (familyChanged, successors, predMove).
//
// evaluate (verdict.go) stays the reference. With Config.Verify, used by
// the tests, every live view is checked against it after every batch.

// evalCache is a rollout's last evaluation.
type evalCache struct {
	expected []Emitter // sorted
	preds    predSet
	deps     map[string][]string
	slots    []slot // one per expected layer
	silent   int    // expected layers without evidence: where cluster.silent lists the rollout
	sum      *tally // what the slots add up to
	// shown is the view last made from the slots. While it is the
	// rollout's view, the next one copies only the layers patched since;
	// nil when the slots moved (a layer inserted) or were read afresh.
	shown *View
}

// dirtySet is what a batch may have changed, by rollout: the emitters
// whose slots must be read again, or everything (full). A rollout in the
// set with neither is only recomputed from its slots.
type dirtySet map[*rolloutState]*dirt

type dirt struct {
	full  bool
	ems   map[Emitter]struct{}
	moves []predMove // in the order they happened
}

// predMove is a change of the revision a rollout replaced on one emitter
// (a log's entry inserted or removed just before its own): its evaluation
// absorbs it by counting, unless a revision stops or starts being one it
// replaced, which may change what it expects.
type predMove struct {
	e        Emitter
	from, to string // "": none
}

func (d dirtySet) get(r *rolloutState) *dirt {
	x := d[r]
	if x == nil {
		x = &dirt{}
		d[r] = x
	}
	return x
}

func (d dirtySet) slot(r *rolloutState, e Emitter) {
	if d == nil || r == nil {
		return
	}
	x := d.get(r)
	if x.full {
		return
	}
	if x.ems == nil {
		x.ems = map[Emitter]struct{}{}
	}
	x.ems[e] = struct{}{}
}

func (d dirtySet) full(r *rolloutState) {
	if d == nil || r == nil {
		return
	}
	x := d.get(r)
	x.full, x.ems, x.moves = true, nil, nil
}

// predMoved records that r's predecessor on e moved from one revision to
// another, and that e's slot must be read again. A release has none
// (predecessor).
func (d dirtySet) predMoved(r *rolloutState, e Emitter, from, to string) {
	if d == nil || r == nil || from == to || e.IsRelease() {
		return
	}
	d.slot(r, e)
	if x := d[r]; !x.full {
		x.moves = append(x.moves, predMove{e, from, to})
	}
}

func (d dirtySet) touch(r *rolloutState) {
	if d != nil && r != nil {
		d.get(r)
	}
}

// readers recomputes the rollouts that compare r with themselves, to tell
// whether r superseded them: for each of r's entries, the rollout of the
// entry before it, and those silent on that emitter that began between
// the two. They read r's start and display revision.
func (d dirtySet) readers(c *cluster, r *rolloutState) {
	if d == nil {
		return
	}
	for e, ev := range r.ev {
		lg := c.logs[e]
		if lg == nil {
			continue
		}
		x := logEntry{ev.First, r.key.Hash}
		i, _ := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
		var lo logEntry
		if i > 0 {
			lo = lg.revs[i-1]
			d.touch(c.rollouts[lo.hash])
		}
		c.silentBetween(e, lo, x, d.touch)
	}
}

// visibleSet is, by rollout, what a batch changed of it that others can
// see (see set): the emitters whose evidence did, and whether more did
// (its start or its source moved, or a release's evidence changed).
type visibleSet map[*rolloutState]*visibility

type visibility struct {
	ems []Emitter
	all bool
}

func (v visibleSet) add(r *rolloutState, e Emitter, more bool) {
	if v == nil {
		return
	}
	s := v[r]
	if s == nil {
		s = &visibility{}
		v[r] = s
	}
	s.all = s.all || more || !e.IsLayer()
	if !s.all {
		s.ems = append(s.ems, e)
	}
}

// successors records what the rollouts that read r as a predecessor may
// read of a change to r: their expected layers, and the revisions their
// silent layers were at, come from it. Of r they read only the layers it
// reported (carried): a change to r's evidence on layer e is one to their
// slot of e when they expect e without evidence on it, nothing when they
// have some, and may make them expect e otherwise (or may have, when they
// kept no evaluation to tell). Any other change (all) rebuilds them.
func (d dirtySet) successors(r *rolloutState, s *visibility) {
	for q := range r.next {
		if s.all {
			d.full(q)
			continue
		}
		for _, e := range s.ems {
			switch {
			case q.ev[e] != nil:
			case q.cache != nil && q.cache.expects(e):
				d.slot(q, e)
			default:
				d.full(q)
			}
		}
	}
}

// moved records that r's start moved: its silent layers' places in their
// logs moved, and the rollouts that compare starts with r must look again.
func (d dirtySet) moved(c *cluster, r *rolloutState) {
	d.full(r)
	d.readers(c, r)
}

// evaluateIn is evaluate, patching r's last evaluation by what d says
// changed, or reading r afresh when the evaluation cannot absorb it.
func (c *cluster) evaluateIn(r *rolloutState, d *dirt, cfg *Config, now time.Time) *View {
	k := r.cache
	var changed []int
	ok := k != nil && !d.full && k.preds.move(d.moves)
	if ok {
		changed, ok = c.patchAll(r, k, d.ems)
	}
	if !ok {
		k = c.recache(r, cfg)
	}
	v := r.folds.header(r, cfg)
	at := func(i int) LayerView { return k.slots[i].lv }
	if r.view != nil && r.view == k.shown {
		v.Layers = r.view.Layers.patch(changed, at)
	} else {
		var prev Layers
		if r.view != nil {
			prev = r.view.Layers
		}
		v.Layers = prev.with(len(k.slots), at)
	}
	c.conclude(v, r, k.expected, k.sum.sums(c, r, k.slots, k.preds), now)
	k.shown = v
	return v
}

// move counts the predecessors' moves in, and reports false when a
// revision starts or stops being one replaced: then the rollout's expected
// layers may change, and it is read afresh (the set is left half-counted:
// recache replaces it).
func (p predSet) move(moves []predMove) bool {
	for _, m := range moves {
		if m.from != "" {
			switch p[m.from] {
			case 0:
				return false
			case 1:
				delete(p, m.from)
				return false
			}
			p[m.from]--
		}
		if m.to != "" {
			if p[m.to]++; p[m.to] == 1 {
				return false
			}
		}
	}
	return true
}

// patchAll reads again the slots of the emitters in ems, and returns the
// indexes of those it read; false when the evaluation cannot absorb the
// change.
func (c *cluster) patchAll(r *rolloutState, k *evalCache, ems map[Emitter]struct{}) ([]int, bool) {
	var changed []int
	var holders []Emitter
	for e := range ems {
		if e.IsRelease() {
			// A release's evidence is read by the slots of the layers
			// that hold it.
			c.holders(r, e, func(l Emitter) { holders = append(holders, l) })
		}
	}
	for _, l := range holders {
		if _, ok := ems[l]; !ok {
			ems[l] = struct{}{}
		}
	}
	for e := range ems {
		if e.IsRelease() {
			continue
		}
		i, ok := c.patch(r, k, e)
		if !ok {
			return nil, false
		}
		if i >= 0 {
			changed = append(changed, i)
		}
	}
	if k.sum == nil {
		// Slots moved: the tally and the last view's layers are not where
		// the slots are now.
		k.sum, k.shown = newTally(k.slots, k.deps), nil
	}
	return changed, true
}

// recache reads r's expected layers and slots afresh.
func (c *cluster) recache(r *rolloutState, cfg *Config) *evalCache {
	expected, was, preds := c.expected(r, cfg)
	k := &evalCache{expected: expected, preds: preds, deps: dependsOn(r), slots: make([]slot, len(expected))}
	for i, l := range expected {
		k.slots[i] = c.slotWas(r, l, was[i])
	}
	k.sum = newTally(k.slots, k.deps)
	c.setCache(r, k)
	return k
}

// setCache installs r's evaluation and indexes the layers r expects
// without evidence on them (silentBetween).
func (c *cluster) setCache(r *rolloutState, k *evalCache) {
	c.unsilence(r)
	r.cache = k
	if k == nil {
		return
	}
	for _, l := range k.expected {
		if r.ev[l] == nil {
			set := c.silent[l]
			if set == nil {
				set = map[*rolloutState]struct{}{}
				c.silent[l] = set
			}
			set[r] = struct{}{}
			k.silent++
		}
	}
}

// unsilence takes r out of the index of silent layers: it can be listed
// only under the layers its evaluation expects.
func (c *cluster) unsilence(r *rolloutState) {
	if r.cache == nil {
		return
	}
	for _, l := range r.cache.expected {
		if set := c.silent[l]; set != nil {
			delete(set, r)
			if len(set) == 0 {
				delete(c.silent, l)
			}
		}
	}
	r.cache.silent = 0
}

// patch reads e's slot again, and returns its index (-1: e is not
// expected). It reports false when the change is one the cache cannot
// absorb: e now places r after a revision it did not replace before.
func (c *cluster) patch(r *rolloutState, k *evalCache, e Emitter) (int, bool) {
	ev := r.ev[e]
	if ev != nil {
		if p := c.predecessor(r, e); p != "" && !k.preds.has(p) {
			return -1, false
		}
	}
	i, found := slices.BinarySearchFunc(k.expected, e, compareEmitters)
	if !found {
		// Without membership marks, a layer that reports the revision is
		// expected (see expected).
		if ev == nil || !e.IsLayer() || r.known {
			return -1, true
		}
		k.expected = slices.Insert(k.expected, i, e)
		k.slots = slices.Insert(k.slots, i, slot{})
		k.sum = nil // patchAll counts the slots again
	}
	if set := c.silent[e]; ev != nil && set != nil {
		if _, ok := set[r]; ok {
			delete(set, r)
			if len(set) == 0 {
				delete(c.silent, e)
			}
			k.silent--
		}
	}
	old := k.slots[i]
	k.slots[i] = c.layerSlot(r, e, k.preds)
	if k.sum != nil {
		k.sum.update(k.slots, k.deps, i, &old)
	}
	return i, true
}

// cacheIdle is how long a final rollout's evaluation is kept after its
// last use. Most live rollouts are final and wait to settle; their
// evaluations would make most of the memory.
const cacheIdle = 10 * time.Second

// evictCaches drops the evaluations of final rollouts not evaluated for
// cacheIdle whose expected layers all have evidence: nothing indexes them
// (silentBetween), and their next evaluation reads everything again.
func (c *cluster) evictCaches(now time.Time) {
	for _, r := range c.rollouts {
		if r.cache != nil && r.cache.silent == 0 && r.view != nil && r.view.Terminal && now.Sub(r.evalAt) > cacheIdle {
			r.cache = nil
		}
	}
}

func compareEmitters(a, b Emitter) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

// Verify checks, when Config.Verify is on, every live view against the
// reference evaluation at the time it was made, and the folds against the
// evidence; it panics on a difference, which is a bug.
func (m *Model) Verify() {
	if !m.cfg.Verify {
		return
	}
	for _, c := range m.clusters {
		for _, r := range c.rollouts {
			if r.view == nil {
				continue
			}
			if ref := c.evaluate(r, &m.cfg, r.evalAt); !reflect.DeepEqual(r.view, ref) {
				got, _ := json.Marshal(r.view)
				want, _ := json.Marshal(ref)
				panic(fmt.Sprintf("rollout %s: the incremental view differs from the reference:\n%s\n%s", r.key, got, want))
			}
			if got, want := r.fam, familyOf(c.component(r)); !got.sameAs(want) {
				panic(fmt.Sprintf("rollout %s: its family has %d rollouts and %d layers; its emitters connect %d and %d",
					r.key, len(got.members), len(got.layers), len(want.members), len(want.layers)))
			}
			var all folds
			for em, ev := range r.ev {
				all.add(em, ev)
			}
			if !reflect.DeepEqual(all, r.folds) {
				panic(fmt.Sprintf("rollout %s: folds %+v, the evidence says %+v", r.key, r.folds, all))
			}
		}
	}
}

// routing is who the Alerts of a rollout's emitters route its mails to
// (eventMetadata mail_to): all of them, and by emitter (a layer's name, or
// a source's kind/namespace/name).
type routing struct {
	all    []string // sorted
	byName map[string][]string
}

func (rt *routing) add(e Emitter, to []string) {
	if len(to) == 0 {
		return
	}
	if rt.byName == nil {
		rt.byName = map[string][]string{}
	}
	name := e.Layer()
	if !e.IsLayer() {
		name = e.String()
	}
	rt.byName[name] = to
	for _, a := range to {
		if i, found := slices.BinarySearch(rt.all, a); !found {
			rt.all = slices.Insert(rt.all, i, a)
		}
	}
}
