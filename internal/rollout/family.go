package rollout

import (
	"maps"
	"slices"
)

// Without cluster access, which layers a rollout expects is read from what
// the layers reported before it (docs/verdicts.md, "Ordering revisions
// without the cluster"): every layer whose last report is of an older
// revision of the same source must move to it. Events do not say which
// source a layer reads, so "the same source" is a family: the live
// rollouts connected through their emitters, an emitter's revisions being
// all of one source (a GitRepository's, a layer's). A family is what the
// replaced revisions, taken transitively, reach, and more: a revision that
// reached only platform (infra's events of it lost) is of the family
// through platform's older reports.
//
// The families are kept as rollouts come and go: an emitter's first report
// on a rollout joins the rollout's family with the emitter's other
// revisions' (join), and a rollout that leaves memory may split its family
// (leave). Verify checks them against the components read afresh.

// family is a set of live rollouts connected through their emitters.
type family struct {
	members []*rolloutState      // by start: the newest last
	layers  map[Emitter]struct{} // the layers with evidence on a member
	// sorted is layers in emitter order, made when first asked for (nil:
	// not yet) and kept as layers join: a new revision's first
	// evaluation walks its family's layers in order, which at 1,000
	// layers was a fifth of it spent sorting them.
	sorted []Emitter
}

// addLayer adds layer e, which has evidence on a member now.
func (f *family) addLayer(e Emitter) {
	if _, ok := f.layers[e]; ok {
		return
	}
	f.layers[e] = struct{}{}
	if f.sorted != nil {
		i, _ := slices.BinarySearchFunc(f.sorted, e, compareEmitters)
		f.sorted = slices.Insert(f.sorted, i, e)
	}
}

// sortedLayers is the family's layers in emitter order.
func (f *family) sortedLayers() []Emitter {
	if f.sorted == nil && len(f.layers) > 0 {
		f.sorted = make([]Emitter, 0, len(f.layers))
		for l := range f.layers {
			f.sorted = append(f.sorted, l)
		}
		slices.SortFunc(f.sorted, compareEmitters)
	}
	return f.sorted
}

// sameAs reports whether f and o have the same members, in order, and
// layers, and f's sorted layers, when made, are o's (Verify's check).
func (f *family) sameAs(o *family) bool {
	return slices.Equal(f.members, o.members) && maps.Equal(f.layers, o.layers) &&
		(f.sorted == nil || slices.Equal(f.sorted, o.sortedLayers()))
}

func newFamily(r *rolloutState) *family {
	return &family{members: []*rolloutState{r}, layers: map[Emitter]struct{}{}}
}

func byStart(a, b *rolloutState) int { return a.start().compare(b.start()) }

// after is where the members that began after x begin.
func (f *family) after(x logEntry) int {
	i, found := slices.BinarySearchFunc(f.members, x, func(m *rolloutState, x logEntry) int { return m.start().compare(x) })
	if found {
		i++
	}
	return i
}

// join merges the families of a and b, the smaller into the larger, and
// reports whether they were two.
func join(a, b *rolloutState) bool {
	fa, fb := a.fam, b.fam
	if fa == fb {
		return false
	}
	if len(fa.members) < len(fb.members) {
		fa, fb = fb, fa
	}
	for _, m := range fb.members {
		m.fam = fa
	}
	if len(fb.members) == 1 {
		// A new revision joins its source's: one insertion.
		m := fb.members[0]
		fa.members = slices.Insert(fa.members, fa.after(m.start()), m)
	} else {
		fa.members = append(fa.members, fb.members...)
		slices.SortFunc(fa.members, byStart)
	}
	for l := range fb.layers {
		fa.addLayer(l)
	}
	return true
}

// joinLog joins r's family with the family of the other revisions e
// reported (an emitter's revisions are of one family), when it has any.
func (c *cluster) joinLog(r *rolloutState, e Emitter) bool {
	if e.IsRelease() {
		// A release's reports follow its layer's, which joins them.
		return false
	}
	lg := c.logs[e]
	if lg == nil {
		return false
	}
	for _, x := range lg.revs {
		if o := c.rollouts[x.hash]; o != nil && o != r {
			return join(r, o)
		}
	}
	return false
}

// started moves r, whose start moved, to where its start is now.
func (f *family) started(r *rolloutState) {
	i := slices.Index(f.members, r)
	f.members = slices.Delete(f.members, i, i+1)
	f.members = slices.Insert(f.members, f.after(r.start()), r)
}

// leave takes r, dropped from the index, out of its family, and splits
// what is left into the components it still makes: r may have been the
// only revision two emitters shared.
func (c *cluster) leave(r *rolloutState) {
	f := r.fam
	left := make(map[*rolloutState]struct{}, len(f.members))
	for _, m := range f.members {
		if m != r {
			left[m] = struct{}{}
		}
	}
	r.fam = newFamily(r)
	for len(left) > 0 {
		var seed *rolloutState
		for m := range left {
			seed = m
			break
		}
		nf := familyOf(c.component(seed))
		for _, m := range nf.members {
			m.fam = nf
			delete(left, m)
		}
	}
}

// familyOf makes the family of members: in order, with its layers.
func familyOf(members map[*rolloutState]struct{}) *family {
	f := &family{members: make([]*rolloutState, 0, len(members)), layers: map[Emitter]struct{}{}}
	for m := range members {
		f.members = append(f.members, m)
		for e := range m.ev {
			if e.IsLayer() {
				f.layers[e] = struct{}{}
			}
		}
	}
	slices.SortFunc(f.members, byStart)
	return f
}

// component reads afresh the live rollouts connected to r through their
// emitters' logs.
func (c *cluster) component(r *rolloutState) map[*rolloutState]struct{} {
	out := map[*rolloutState]struct{}{r: {}}
	seen := map[Emitter]bool{}
	queue := []*rolloutState{r}
	for len(queue) > 0 {
		q := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for e := range q.ev {
			if e.IsRelease() || seen[e] {
				continue
			}
			seen[e] = true
			lg := c.logs[e]
			if lg == nil {
				continue
			}
			for _, x := range lg.revs {
				o := c.rollouts[x.hash]
				if _, ok := out[o]; o != nil && !ok {
					out[o] = struct{}{}
					queue = append(queue, o)
				}
			}
		}
	}
	return out
}

// latestBefore is the rollout of the revision layer l was at when r
// began, nil when l reported no older revision of r's family: the one it
// reported last before r began (by when it first reported it: a binary
// search of its log), or, when it reported none before then (a layer that
// was behind), the latest-starting of the older ones it reported since.
func (c *cluster) latestBefore(l Emitter, r *rolloutState) *rolloutState {
	lg := c.logs[l]
	if lg == nil {
		return nil
	}
	st := r.start()
	i, _ := lg.search(st)
	for j := i - 1; j >= 0; j-- {
		// Its entries before r's start are of older revisions: each began
		// at or before l reported it.
		if q := c.rollouts[lg.revs[j].hash]; q != nil && q != r && q.fam == r.fam {
			return q
		}
	}
	var best *rolloutState
	for _, x := range lg.revs[i:] {
		q := c.rollouts[x.hash]
		if q == nil || q == r || q.fam != r.fam || q.start().compare(st) >= 0 {
			continue
		}
		if best == nil || best.start().compare(q.start()) < 0 {
			best = q
		}
	}
	return best
}

// otherSource reports whether the sources' events say a and b are
// revisions of different sources.
func otherSource(a, b *rolloutState) bool {
	return a.source != (Ref{}) && b.source != (Ref{}) && a.source != b.source
}

// wasAt is the revision a layer silent on r was at: the latest it reported
// before r, or, when every revision it reported began after r, the latest
// of the revisions r replaced that it carried; "" when none.
func (c *cluster) wasAt(r *rolloutState, l Emitter, preds predSet) string {
	at, _ := c.lastAt(l, r, preds)
	return at.revisionOn(l)
}

// lastAt is the rollout of the revision wasAt names (nil: none), and
// whether it makes layer l expected by r: a revision of r's family older
// than r and not of another source, or one r replaced that l carried.
func (c *cluster) lastAt(l Emitter, r *rolloutState, preds predSet) (at *rolloutState, expect bool) {
	if at = c.latestBefore(l, r); at != nil {
		return at, !otherSource(at, r)
	}
	at = c.carried(l, preds)
	return at, at != nil
}

// revisionOn is the revision r's evidence on e names; "" for no rollout.
func (r *rolloutState) revisionOn(e Emitter) string {
	if r == nil {
		return ""
	}
	return r.ev[e].Revision
}

// carried is the latest of the revisions r replaced (preds) that layer l
// reported, by when it first did; nil when none.
func (c *cluster) carried(l Emitter, preds predSet) *rolloutState {
	var at *logEntry
	for p := range preds {
		if ev := c.rollouts[p].ev[l]; ev != nil {
			if x := (logEntry{ev.First, p}); at == nil || at.compare(x) < 0 {
				at = &x
			}
		}
	}
	if at == nil {
		return nil
	}
	return c.rollouts[at.hash]
}

// familyChanged records what a change to r that its family reads may
// change: the rollouts of the family judged on events alone that began
// after from (every one, when from is zero) and before until. Each is
// read afresh, or, when only the revision a silent layer was at may have
// moved (layer, not zero: it reported r), its slot. On a source's newest
// commit there are none, and nothing is looked at. A change to one
// layer's report concerns only the rollouts that began before that
// layer's next report (until): for those after, the latest revision it
// reported before them is that one or a later one (latestBefore).
func (d dirtySet) familyChanged(r *rolloutState, from, until logEntry, layer Emitter) {
	if d == nil {
		return
	}
	f := r.fam
	for _, m := range f.members[f.after(from):] {
		if m.start().compare(until) >= 0 {
			break
		}
		if m == r || m.known {
			continue
		}
		switch {
		case layer == (Emitter{}):
			d.full(m)
		case m.ev[layer] != nil:
			// It reported m itself: what it reported before does not matter.
		case m.cache != nil && !otherSource(r, m) && m.cache.expects(layer):
			d.slot(m, layer)
		default:
			d.full(m)
		}
	}
}

// familyBetween rebuilds the rollouts of r's family judged on events
// alone that began after from and before until.
func (d dirtySet) familyBetween(r *rolloutState, from, until logEntry) {
	if d == nil {
		return
	}
	for _, m := range r.fam.members[r.fam.after(from):] {
		if m.start().compare(until) >= 0 {
			break
		}
		if m != r && !m.known {
			d.full(m)
		}
	}
}

func (k *evalCache) expects(l Emitter) bool {
	_, found := slices.BinarySearchFunc(k.expected, l, compareEmitters)
	return found
}
