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
	layer Emitter
}

func (a holdEntry) compare(b holdEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return compareEmitters(a.layer, b.layer)
}

// hold indexes the releases a layer's evidence on r holds.
func (c *cluster) hold(r *rolloutState, e Emitter, ev *Evidence) {
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
func (c *cluster) unhold(r *rolloutState, e Emitter, ev *Evidence) {
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

// holders calls f with every layer whose evidence on r holds release.
func (c *cluster) holders(r *rolloutState, release Emitter, f func(Emitter)) {
	for _, h := range c.holds[release] {
		if h.hash == r.key.Hash {
			f(h.layer)
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
