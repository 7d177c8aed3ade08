package rollout

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Releases are objects a layer applies that roll out on their own (a
// HelmRelease: helm-controller installs or upgrades it after the layer has
// applied it). What they report names no revision of the layer's source,
// only their own (a chart version), so a release's evidence belongs to the
// revision whose apply last changed it before the report: the layer's
// hold (docs/verdicts.md, "Releases inside a layer"). A layer has applied
// a revision only once every release its apply of that revision changed
// is released, and a release's failure is the layer's (applied.go).

// holdEntry is one layer's hold of a release at one revision.
type holdEntry struct {
	at    time.Time // the layer's earliest report naming the release
	hash  string
	layer *Emitter // its log's: one per live rollout of each release, 48 bytes less
}

func (a holdEntry) compare(b holdEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return compareEmitters(*a.layer, *b.layer)
}

// hold indexes the releases a layer's evidence on r holds; e is the
// layer's log's emitter.
func (c *cluster) hold(r *rolloutState, e *Emitter, ev *Evidence) {
	if ev == nil {
		return
	}
	for _, h := range ev.holds() {
		x := holdEntry{h.At, r.key.Hash, e}
		list := c.holds[h.Release]
		if i, found := slices.BinarySearchFunc(list, x, holdEntry.compare); !found {
			c.holds[h.Release] = slices.Insert(list, i, x)
		}
	}
}

// unhold takes what hold indexed out again.
func (c *cluster) unhold(r *rolloutState, e *Emitter, ev *Evidence) {
	if ev == nil {
		return
	}
	for _, h := range ev.holds() {
		list := c.holds[h.Release]
		if i, found := slices.BinarySearchFunc(list, holdEntry{h.At, r.key.Hash, e}, holdEntry.compare); found {
			list = slices.Delete(list, i, i+1)
		}
		if len(list) == 0 {
			delete(c.holds, h.Release)
		} else {
			c.holds[h.Release] = list
		}
	}
}

// attribute finds the revision a release's observation belongs to: the
// live hold of it reported last at or before the observation. A report
// at the time of the hold is the hold's: a quick release (a chart of
// ConfigMaps) reports in the second of the apply, and Flux's times are
// whole seconds.
// What events cannot tell apart is a report of an action that was already
// under way when the apply changed the release (docs/verdicts.md, "Releases
// inside a layer").
//
// A release's state read from the cluster says when the apply it follows
// happened (Applied): it belongs to the hold reported first at or after
// that apply (kustomize-controller reports an apply after making it).
func (c *cluster) attribute(o *Observation) (holdEntry, bool) {
	list := c.holds[o.Emitter]
	if !o.Applied.IsZero() {
		i, _ := slices.BinarySearchFunc(list, o.Applied, func(h holdEntry, t time.Time) int {
			if h.at.Before(t) {
				return -1
			}
			return 1
		})
		if i == len(list) {
			return holdEntry{}, false
		}
		return list[i], true
	}
	i, _ := slices.BinarySearchFunc(list, o.At, func(h holdEntry, t time.Time) int {
		if h.at.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return holdEntry{}, false
	}
	return list[i-1], true
}

// named finds the rollout a release's report names by commit (Commit): the
// one live rollout whose hash begins with it, read by layers (not a
// chart's own source: an OCI chart's version ends in its digest, which
// names the chart's revision). The release's layer (the one the cluster
// names, else the one that held the release last) must have evidence on
// it (a report, or the cluster reader's mark that its source moved
// there), or, from events alone, be on its source (sameSource): the
// release reported before its layer did, and the layer's evidence begins
// with the hold. False when the report names no such commit: it is
// attributed by the holds.
func (c *cluster) named(o *Observation) (holdEntry, bool) {
	if o.Commit == "" {
		return holdEntry{}, false
	}
	r := c.rollouts[o.Commit]
	if r == nil {
		for h, x := range c.rollouts {
			if strings.HasPrefix(h, o.Commit) {
				if r != nil {
					return holdEntry{}, false // ambiguous: not this one's to say
				}
				r = x
			}
		}
	}
	layer := o.Layer
	if list := c.holds[o.Emitter]; layer == (Emitter{}) && len(list) > 0 {
		layer = *list[len(list)-1].layer
	}
	if r == nil || !c.read(r) || layer == (Emitter{}) {
		return holdEntry{}, false
	}
	ev := r.ev[layer]
	if ev == nil {
		// The cluster reader resubmits the release's status with its
		// layer's, which will have evidence then.
		if o.Layer != (Emitter{}) || !c.sameSource(layer, r) {
			return holdEntry{}, false
		}
		return holdEntry{o.At, r.key.Hash, &layer}, true
	}
	at := ev.First
	for _, h := range ev.holds() {
		if h.Release == o.Emitter {
			at = h.At
		}
	}
	return holdEntry{at, r.key.Hash, &c.logs[layer].emitter}, true
}

// sameSource reports whether r is a revision of the source layer reads, as
// far as events tell: an emitter with evidence on r (a source, or a layer:
// a Kustomization reads one source) has evidence on another revision the
// layer reported too.
func (c *cluster) sameSource(layer Emitter, r *rolloutState) bool {
	for e := range r.ev {
		if e.IsRelease() || e == layer {
			continue
		}
		for _, x := range c.logs[e].revs {
			if q := c.rollouts[x.hash]; q != r && q.ev[layer] != nil {
				return true
			}
		}
	}
	return false
}

// applyReleases merges the reports of releases in a batch, after the
// layers' reports of it are installed: each belongs to the rollout whose
// layer's apply last changed the release before it (hold). It adds what
// it merges to puts and installs it; it returns how many it ignored.
func (m *Model) applyReleases(puts map[EvidenceKey]*Evidence, releases []*Observation, inBatch map[Key]map[Emitter]bool, settled map[Key]bool, dirty dirtySet, visible visibleSet) (ignored int) {
	if len(releases) == 0 {
		return 0
	}
	// Reports that name their commit first: the hold they make may be the
	// one a report of the same batch that names none belongs to.
	named := make([]holdEntry, len(releases))
	held := map[EvidenceKey]*Evidence{}
	for i, o := range releases {
		if h, ok := m.cluster(o.Cluster).named(o); ok {
			named[i] = h
			m.holdNamed(held, o, h, inBatch, settled)
		}
	}
	m.install(held, dirty, visible)
	maps.Copy(puts, held)
	late := map[EvidenceKey]*Evidence{}
	for i, o := range releases {
		cl := m.cluster(o.Cluster)
		h, ok := named[i], named[i].hash != ""
		if !ok {
			h, ok = cl.attribute(o)
			ok = ok && !cl.namesAnother(o, h, late)
		}
		if f, floorSettled := cl.floors[o.Emitter]; !ok || floorSettled && h.at.Before(f.first) {
			// No live revision's apply changed it, or the one that did
			// is older than one whose rollout with it settled: about
			// settled history, or nothing this service follows.
			ignored++
			continue
		}
		ev := cl.rollouts[h.hash].ev[*h.layer]
		if ev == nil {
			// The hold a named report made was refused (about settled
			// history).
			ignored++
			continue
		}
		a := *o
		a.Hash, a.Revision = h.hash, ev.Revision
		if !m.merge(late, &a, inBatch, settled) {
			ignored++
		}
	}
	m.install(late, dirty, visible)
	maps.Copy(puts, late)
	return ignored
}

// namesAnother reports whether o, a report naming a commit no live
// rollout has (the chart of a commit whose layers have not reported it:
// helm-controller released it first), would go by the holds (h) to the
// rollout of another commit whose release was released already, in batch
// or before: that rollout was released with its own chart, and this report
// is not of its deploy. Taken for it, a failure in the second of its
// completion would fail it (Flux's times are whole seconds).
func (c *cluster) namesAnother(o *Observation, h holdEntry, batch map[EvidenceKey]*Evidence) bool {
	if o.Commit == "" || strings.HasPrefix(h.hash, o.Commit) {
		return false
	}
	r := c.rollouts[h.hash]
	ev := batch[EvidenceKey{r.key, r.seq, o.Emitter}]
	if ev == nil {
		ev = r.ev[o.Emitter]
	}
	_, ok := released(ev)
	return ok
}

// holdNamed makes the layer's evidence on the rollout a release's report
// named hold the release, from the layer's first report of it, when no
// change set of the layer said so (the commit changed the chart, not the
// HelmRelease).
func (m *Model) holdNamed(puts map[EvidenceKey]*Evidence, o *Observation, h holdEntry, inBatch map[Key]map[Emitter]bool, settled map[Key]bool) {
	r := m.clusters[o.Cluster].rollouts[h.hash]
	ev := r.ev[*h.layer]
	for _, x := range ev.holds() {
		if x.Release == o.Emitter {
			return
		}
	}
	rev := r.revision
	if ev != nil {
		rev = ev.Revision
	}
	m.merge(puts, &Observation{Cluster: o.Cluster, Emitter: *h.layer, Revision: rev, Hash: h.hash,
		At: h.at, Holds: []Emitter{o.Emitter}}, inBatch, settled)
}

// holders calls f with every layer whose evidence on r holds release.
func (c *cluster) holders(r *rolloutState, release Emitter, f func(Emitter)) {
	for _, h := range c.holds[release] {
		if h.hash == r.key.Hash {
			f(*h.layer)
		}
	}
}

// ReleaseView is one release a layer's apply of the rollout's revision
// changed: its state as the layer's, what it said last.
type ReleaseView struct {
	Kind      string     `json:"kind"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	State     LayerState `json:"state"` // pending until it reports after the apply
	Reason    string     `json:"reason"`
	Message   string     `json:"message"`
	At        *time.Time `json:"at"`
	Since     time.Time  `json:"since"` // when the layer's apply changed it
}

// releaseViews shows the releases ev (a layer's evidence on r) holds.
func releaseViews(r *rolloutState, ev *Evidence) []ReleaseView {
	holds := ev.holds()
	if len(holds) == 0 {
		return nil
	}
	out := make([]ReleaseView, len(holds))
	for i, h := range holds {
		lv := layerView(h.Release, r.ev[h.Release], "")
		out[i] = ReleaseView{Kind: h.Release.Kind, Namespace: h.Release.Namespace, Name: h.Release.Name,
			State: lv.State, Reason: lv.Reason, Message: lv.Message, At: lv.At, Since: h.At}
	}
	return out
}

// Ref names the release as failures do.
func (rv ReleaseView) Ref() Ref { return Ref{rv.Kind, rv.Namespace, rv.Name} }

// Object names the release as people read it: Kind/namespace/name.
func (rv ReleaseView) Object() string { return rv.Ref().String() }

// releaseNote is a message about a release, shown on its layer.
func releaseNote(rv *ReleaseView, msg string) string { return rv.Object() + ": " + msg }
