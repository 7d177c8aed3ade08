package rollout

import "time"

// Whether a layer has applied a rollout's revision is decided here, and
// only here: its own report, and every release its apply of the revision
// changed (release.go says which those are). The verdict's precedence
// over all layers is decide's (verdict.go).

// slot is one expected layer's part of a rollout's view: what its own
// evidence, the releases it holds and its emitter's log say.
type slot struct {
	lv LayerView
	outcome
	working bool     // still applying this revision: it has not moved on
	next    logEntry // the revision the layer moved to next, when hasNext
	hasNext bool
}

// outcome is what a layer's evidence says of its apply of a revision,
// its releases included.
type outcome struct {
	succeeded    bool
	succAt       time.Time // the success (the last release's, when later), when succeeded
	firstFailure time.Time // earliest failure, the releases' included; zero: none
}

// applied decides whether the layer whose evidence on r is ev applied r's
// revision: it reported success, and every release it holds was released
// after it; a release's failure is the layer's.
func applied(r *rolloutState, ev *Evidence) outcome {
	var o outcome
	if ev == nil {
		return o
	}
	if ev.Succeeded != nil {
		o.succeeded, o.succAt = true, ev.Succeeded.At
	}
	o.firstFailure = earliestFailure(o.firstFailure, ev.Failures)
	for _, h := range ev.holds() {
		rev := r.ev[h.Release]
		if at, ok := released(rev); !ok {
			o.succeeded = false
		} else if at.After(o.succAt) {
			o.succAt = at
		}
		if rev != nil {
			o.firstFailure = earliestFailure(o.firstFailure, rev.Failures)
		}
	}
	return o
}

// earliestFailure is the earlier of t (zero: none) and the first of fs.
func earliestFailure(t time.Time, fs []Failure) time.Time {
	for _, f := range fs {
		if t.IsZero() || f.First.Before(t) {
			t = f.First
		}
	}
	return t
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

// layerSlot reads one expected layer of r; preds are the revisions r
// replaced. A silent layer shows the revision it was at (wasAt), as far as
// events tell.
func (c *cluster) layerSlot(r *rolloutState, l Emitter, preds predSet) slot {
	was := ""
	if r.ev[l] == nil && !r.known {
		was = c.wasAt(r, l, preds)
	}
	return c.slotWas(r, l, was)
}

// slotWas is layerSlot once the revision a silent layer was at is known:
// was (expected reads it, for every layer it expects).
func (c *cluster) slotWas(r *rolloutState, l Emitter, was string) slot {
	ev := r.ev[l]
	s := slot{lv: layerView(l, ev, was), outcome: applied(r, ev)}
	showReleases(&s.lv, r, ev)
	s.working = s.lv.State == LayerProgressing && !c.movedOn(l, r)
	s.next, s.hasNext = c.logs[l].after(r.position(l))
	return s
}

// showReleases shows the releases a layer holds on its view, and says on
// the layer what applied decided from them when its own report does not:
// failed when a release failed, progressing while one is not released.
func showReleases(lv *LayerView, r *rolloutState, ev *Evidence) {
	holds := ev.holds()
	if len(holds) == 0 {
		return
	}
	lv.Releases = releaseViews(r, ev)
	var failed, behind *ReleaseView
	for i, h := range holds {
		rv := &lv.Releases[i]
		if _, ok := released(r.ev[h.Release]); !ok && (rv.State == LayerApplied || rv.State == LayerRecovered) {
			// Its event says so; its status, which says which spec,
			// does not yet.
			rv.State = LayerProgressing
		}
		switch {
		case rv.State == LayerFailed && failed == nil:
			failed = rv
		case rv.State != LayerApplied && rv.State != LayerRecovered && behind == nil:
			behind = rv
		}
	}
	own := lv.State
	switch {
	case own == LayerFailed:
	case failed != nil:
		lv.State, lv.Reason, lv.Message, lv.At = LayerFailed, failed.Reason, releaseNote(failed, failed.Message), failed.At
	case behind != nil && (own == LayerApplied || own == LayerRecovered):
		lv.State, lv.Reason = LayerProgressing, behind.Reason
		lv.Message = releaseNote(behind, "not released yet")
		if behind.Message != "" {
			lv.Message = releaseNote(behind, behind.Message)
		}
		lv.At = behind.At
	}
}
