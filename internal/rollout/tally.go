package rollout

import (
	"slices"
	"time"
)

// A rollout's view reads, besides each expected layer's slot, what the
// slots add up to: whether every layer applied and when the last did, the
// earliest failure, whether a layer is still working, the root cause, the
// layers that fail and those behind, and the revisions the layers moved to
// next. Folding a thousand slots on every event made an event's cost grow
// with its rollout's width, so the engine's evaluation (evalCache) keeps a
// tally of them, updated slot by slot: a segment tree for the folds that
// pick one slot, the lists, and per next revision its earliest move.
//
// The rule of what the slots add up to is written once, here: leaf reads
// a slot, combine folds two runs of slots, and progress concludes from the
// fold. The reference (finish, verdict.go) folds the slots in order, the
// tally as a tree; with Config.Verify the two views are compared after
// every batch.
type tally struct {
	// tree is a segment tree: node 1 is the root, the leaves from
	// len(tree)/2 on, one per block of tallyBlock slots (a leaf per slot
	// took more memory than the slots' views).
	tree []pick
	// The slots whose dependsOn names slot j, ascending, are
	// dependents[from[j]:from[j+1]]: their root-cause eligibility changes
	// when it applies. One array, not a list per slot: a list per slot
	// cost more than the tree.
	dependents, from []int32
	failing          []int    // slots with a failure, ascending
	behind           []string // names of the slots that did not apply, in order; views share it, so it is replaced, never changed
	nexts            map[string]*earliest
}

// pick is what a run of slots adds up to. The indexes are slots, -1 when
// none: the latest success, the earliest failure, the first layer behind
// and the root-cause candidate, each the first slot of the run that
// rootCause and aggregate would settle on.
type pick struct {
	succeeded, working                           int32
	lastSuccess, firstFailure, firstBehind, root int32
}

func nopick() pick { return pick{lastSuccess: -1, firstFailure: -1, firstBehind: -1, root: -1} }

// tallyBlock is how many slots a leaf of the tree folds.
const tallyBlock = 8

// earliest is when the layers that moved from a rollout to one revision
// first did: over n slots, the least time, held by atMin of them. When the
// slots holding it move elsewhere, the least is unknown (stale) until the
// slots are read again.
type earliest struct {
	n, atMin int
	min      time.Time
	stale    bool
}

func newTally(slots []slot, deps map[string][]string) *tally {
	size := 1
	for size*tallyBlock < len(slots) {
		size *= 2
	}
	t := &tally{tree: make([]pick, 2*size), nexts: map[string]*earliest{}}
	if deps != nil {
		t.dependencies(slots, deps)
	}
	for b := range size {
		t.tree[size+b] = block(slots, deps, b)
	}
	for j := size - 1; j >= 1; j-- {
		t.tree[j] = combine(slots, t.tree[2*j], t.tree[2*j+1])
	}
	for i := range slots {
		s := &slots[i]
		if !s.firstFailure.IsZero() {
			t.failing = append(t.failing, i)
		}
		if !s.succeeded {
			t.behind = append(t.behind, s.lv.Name)
		}
		if s.hasNext {
			addNext(t.nexts, s.next)
		}
	}
	return t
}

// dependencies indexes the slots by the slots they depend on.
func (t *tally) dependencies(slots []slot, deps map[string][]string) {
	type edge struct{ on, by int32 }
	var edges []edge
	for i := range slots {
		for _, d := range deps[slots[i].lv.Name] {
			if j, found := findLayer(slots, d); found {
				edges = append(edges, edge{int32(j), int32(i)})
			}
		}
	}
	t.from = make([]int32, len(slots)+1)
	for _, e := range edges {
		t.from[e.on+1]++
	}
	for j := range slots {
		t.from[j+1] += t.from[j]
	}
	t.dependents = make([]int32, len(edges))
	next := slices.Clone(t.from[:len(slots)])
	for _, e := range edges { // by ascending i: each slot's dependents ascend
		t.dependents[next[e.on]] = e.by
		next[e.on]++
	}
}

// update follows slots[i], which was old.
func (t *tally) update(slots []slot, deps map[string][]string, i int, old *slot) {
	s := &slots[i]
	t.set(slots, deps, i/tallyBlock)
	if s.succeeded != old.succeeded {
		if t.from != nil {
			// Ascending: a block is read once however many of its slots
			// depend on slot i.
			last := -1
			for _, j := range t.dependents[t.from[i]:t.from[i+1]] {
				if b := int(j) / tallyBlock; b != last {
					t.set(slots, deps, b)
					last = b
				}
			}
		}
		t.behind = flip(t.behind, s.lv.Name, !s.succeeded)
	}
	if s.firstFailure.IsZero() != old.firstFailure.IsZero() {
		at, found := slices.BinarySearch(t.failing, i)
		if found {
			t.failing = slices.Delete(t.failing, at, at+1)
		} else {
			t.failing = slices.Insert(t.failing, at, i)
		}
	}
	if s.hasNext != old.hasNext || s.next.hash != old.next.hash || !s.next.first.Equal(old.next.first) {
		if old.hasNext {
			t.removeNext(old.next)
		}
		if s.hasNext {
			addNext(t.nexts, s.next)
		}
	}
}

// set reads block b's leaf again and refolds the nodes above it.
func (t *tally) set(slots []slot, deps map[string][]string, b int) {
	j := len(t.tree)/2 + b
	t.tree[j] = block(slots, deps, b)
	for j /= 2; j >= 1; j /= 2 {
		t.tree[j] = combine(slots, t.tree[2*j], t.tree[2*j+1])
	}
}

// block folds the slots of block b.
func block(slots []slot, deps map[string][]string, b int) pick {
	p := nopick()
	for i := b * tallyBlock; i < min(len(slots), (b+1)*tallyBlock); i++ {
		p = combine(slots, p, leaf(slots, deps, i))
	}
	return p
}

// leaf is what one slot contributes: whether its layer counts as applied
// (succeeded), its failure, and whether it is behind and then a root-cause
// candidate. The root cause is, among the layers behind, the one holding
// the others back: with dependsOn from the cluster, a layer behind whose
// dependencies are all through; among those (or without dependsOn) the
// lightest by rootWeight, the first on a tie; in a dependency cycle, where
// every layer waits on another, the first layer behind.
func leaf(slots []slot, deps map[string][]string, i int) pick {
	s, p := &slots[i], nopick()
	if s.succeeded {
		p.succeeded, p.lastSuccess = 1, int32(i)
	} else {
		p.firstBehind = int32(i)
		if deps == nil || !blocked(slots, deps, s.lv.Name) {
			p.root = int32(i)
		}
	}
	if !s.firstFailure.IsZero() {
		p.firstFailure = int32(i)
	}
	if s.working {
		p.working = 1
	}
	return p
}

// combine folds two adjacent runs, a before b; on a tie the earlier slot
// wins.
func combine(slots []slot, a, b pick) pick {
	out := pick{succeeded: a.succeeded + b.succeeded, working: a.working + b.working,
		lastSuccess: a.lastSuccess, firstFailure: a.firstFailure, firstBehind: a.firstBehind, root: a.root}
	if b.lastSuccess >= 0 && (a.lastSuccess < 0 || slots[b.lastSuccess].succAt.After(slots[a.lastSuccess].succAt)) {
		out.lastSuccess = b.lastSuccess
	}
	if b.firstFailure >= 0 && (a.firstFailure < 0 || slots[b.firstFailure].firstFailure.Before(slots[a.firstFailure].firstFailure)) {
		out.firstFailure = b.firstFailure
	}
	if a.firstBehind < 0 {
		out.firstBehind = b.firstBehind
	}
	if b.root >= 0 && (a.root < 0 || rootWeight(slots[b.root].lv.State) < rootWeight(slots[a.root].lv.State)) {
		out.root = b.root
	}
	return out
}

// flip returns names with name taken out (applied) or put back in (in
// again), as a new list: the old one may be a published view's. Layers
// mostly apply in order, so the one taken out is often the first.
func flip(names []string, name string, in bool) []string {
	at, found := slices.BinarySearchFunc(names, name, compareLayerNames)
	switch {
	case in && found, !in && !found:
		return names
	case in:
		return slices.Insert(slices.Clip(names), at, name)
	case len(names) == 1:
		return nil
	case at == 0:
		return names[1:]
	case at == len(names)-1:
		return names[:at:at]
	}
	return slices.Delete(slices.Clone(names), at, at+1)
}

// addNext counts a layer that moved to e.hash at e.first.
func addNext(nexts map[string]*earliest, e logEntry) {
	x := nexts[e.hash]
	if x == nil {
		x = &earliest{}
		nexts[e.hash] = x
	}
	x.add(e.first)
}

func (x *earliest) add(at time.Time) {
	switch {
	case x.n == 0, at.Before(x.min), x.stale && at.Equal(x.min):
		// When stale, every other slot is later than the old least.
		x.min, x.atMin, x.stale = at, 1, false
	case !x.stale && at.Equal(x.min):
		x.atMin++
	}
	x.n++
}

func (t *tally) removeNext(e logEntry) {
	x := t.nexts[e.hash]
	if x.n--; x.n == 0 {
		delete(t.nexts, e.hash)
		return
	}
	if !x.stale && e.first.Equal(x.min) {
		x.atMin--
		x.stale = x.atMin == 0
	}
}

// sums are what the view is concluded from, from the tally.
func (t *tally) sums(c *cluster, r *rolloutState, slots []slot, preds predSet) sums {
	for h, x := range t.nexts {
		if x.stale {
			// The slots holding the least moved on (a revision between
			// r and h arrived late): read the rest again.
			*x = earliest{}
			for i := range slots {
				if s := &slots[i]; s.hasNext && s.next.hash == h {
					x.add(s.next.first)
				}
			}
		}
	}
	top := t.tree[1]
	return sums{c.progress(r, slots, preds, top, t.nexts), t.failing, t.behind, top.rootCause(slots)}
}

// progress concludes where the expected layers stand on r from the fold
// of their slots (top) and, per revision they moved to next, the earliest
// move. A rollout is completed when every expected layer, at least one,
// succeeded. Whether a next revision supersedes r is decided here, not in
// the slot: it depends on that rollout's start and on r's predecessors,
// which change without the layer's log changing.
func (c *cluster) progress(r *rolloutState, slots []slot, preds predSet, top pick, nexts map[string]*earliest) progress {
	p := progress{completed: len(slots) > 0 && int(top.succeeded) == len(slots), working: top.working > 0}
	if i := top.lastSuccess; i >= 0 {
		p.completedAt = slots[i].succAt
	}
	if i := top.firstFailure; i >= 0 {
		p.firstFailure = slots[i].firstFailure
	}
	for h, x := range nexts {
		if c.newer(h, r, preds) && (p.supHash == "" || x.min.Before(p.supAt) || x.min.Equal(p.supAt) && h < p.supHash) {
			p.supAt, p.supHash = x.min, h
		}
	}
	return p
}

// rootCause names the layer the fold picked as the root cause (see leaf).
func (top pick) rootCause(slots []slot) string {
	switch {
	case top.root >= 0:
		return slots[top.root].lv.Name
	case top.firstBehind >= 0:
		return slots[top.firstBehind].lv.Name // a dependency cycle
	}
	return ""
}
