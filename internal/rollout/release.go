package rollout

import (
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
// is released, and a release's failure is the layer's.

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
// live hold of it reported last at or before the observation. Flux's
// times are whole seconds, and a quick release (a chart of ConfigMaps)
// reports in the second of the apply: that report is the new revision's.
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
		applied := o.Applied.Truncate(time.Second)
		i, _ := slices.BinarySearchFunc(list, applied, func(h holdEntry, t time.Time) int {
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

// withReleases folds the releases a layer holds into its slot: it has
// applied the revision once they all have, and their failures are its
// own. The layer's state says so when its own report does not: failed
// when a release failed, progressing while one is not released yet.
func withReleases(s *slot, r *rolloutState, ev *Evidence) {
	holds := ev.holds()
	if len(holds) == 0 {
		return
	}
	s.lv.Releases = releaseViews(r, ev)
	var failed, behind *ReleaseView
	for i, h := range holds {
		rv := &s.lv.Releases[i]
		rev := r.ev[h.Release]
		if at, ok := released(rev); !ok {
			s.succeeded = false
			if rv.State == LayerApplied || rv.State == LayerRecovered {
				// Its event says so; its status, which says which
				// spec, does not yet.
				rv.State = LayerProgressing
			}
		} else if at.After(s.succAt) {
			s.succAt = at
		}
		if rev != nil {
			for _, f := range rev.Failures {
				if s.firstFailure.IsZero() || f.First.Before(s.firstFailure) {
					s.firstFailure = f.First
				}
			}
		}
		switch {
		case rv.State == LayerFailed && failed == nil:
			failed = rv
		case rv.State != LayerApplied && rv.State != LayerRecovered && behind == nil:
			behind = rv
		}
	}
	own := s.lv.State
	switch {
	case own == LayerFailed:
	case failed != nil:
		s.lv.State, s.lv.Reason, s.lv.Message, s.lv.At = LayerFailed, failed.Reason, releaseNote(failed, failed.Message), failed.At
	case behind != nil && (own == LayerApplied || own == LayerRecovered):
		s.lv.State, s.lv.Reason = LayerProgressing, behind.Reason
		s.lv.Message = releaseNote(behind, "not released yet")
		if behind.Message != "" {
			s.lv.Message = releaseNote(behind, behind.Message)
		}
		s.lv.At = behind.At
	}
}

// released is whether a release's evidence on a revision says it was
// released, and when: by its status once the cluster's status of it is
// read, else by its event.
func released(rev *Evidence) (time.Time, bool) {
	switch {
	case rev == nil:
	case rev.Inside == nil || rev.Inside.Watched.IsZero():
		if rev.Succeeded != nil {
			return rev.Succeeded.At, true
		}
	case rev.Inside.Confirmed != nil:
		return rev.Inside.Confirmed.At, true
	}
	return time.Time{}, false
}

// Object names the release as failures do: Kind/namespace/name.
func (rv ReleaseView) Object() string {
	return Emitter{Kind: rv.Kind, Namespace: rv.Namespace, Name: rv.Name}.String()
}

// releaseNote is a message about a release, shown on its layer.
func releaseNote(rv *ReleaseView, msg string) string { return rv.Object() + ": " + msg }
