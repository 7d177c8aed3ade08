package rollout

import (
	"reflect"
	"slices"
	"sort"
	"time"
)

// Settling keeps memory bounded by what can still change. A rollout is
// settled when its verdict is terminal, every emitter it has evidence on
// has moved on to a later revision, and it has been quiet for SettleAfter
// since its last evidence and since the last of its emitters moved on. Its
// final view goes to the archive, its evidence and mail keys are dropped,
// and each emitter's floor is raised to it: evidence about it, or about a
// revision new to an emitter and older than the emitter's floor, is then
// acknowledged and ignored (it concerns history that is already judged).
//
// Settling must not change any verdict. The views of live rollouts next to
// a settled one can depend on it (it replaced their revision, or superseded
// them), so before a rollout is dropped every live rollout whose view may
// depend on it is evaluated with and without it; if one would differ, the
// rollout stays live and is tried again at the next pass.

// Settle moves every rollout that can no longer change to the archive,
// oldest first, until stop says the pass has taken long enough; it returns
// how many it settled and whether some may be left for the next pass.
func (m *Model) Settle(c *Change, now time.Time, stop func() bool) (settled int, more bool) {
	return m.SettleWhere(c, now, stop, nil)
}

// SettleWhere is Settle of only the rollouts archived says the archive
// holds (nil: any): a replica that follows the leader's log drops a
// rollout from memory once the leader's commit put it in the archive, not
// before, or a lookup in between would find it in neither.
func (m *Model) SettleWhere(c *Change, now time.Time, stop func() bool, archived func(Key) bool) (settled int, more bool) {
	from, before := len(c.Forget), len(c.Settle)
	for _, cl := range m.clusters {
		cl.evictCaches(now)
		// Oldest first, so the outcome does not depend on map order, from
		// where the last pass ran out of time: passes that each began at
		// the oldest would check the same rollouts over and over, which
		// cannot settle yet, and never reach the rest.
		byFirst := cl.byFirst()
		i, _ := slices.BinarySearchFunc(byFirst, cl.settleFrom, func(r *rolloutState, t logEntry) int { return r.start().compare(t) })
		for _, r := range byFirst[i:] {
			if more = more || stop(); more {
				cl.settleFrom = r.start()
				break
			}
			if r.view == nil {
				// A revision of a source no layer reads (read): never
				// published, nothing to archive. Once its source moved on
				// and it was quiet for SettleAfter it goes, so that a
				// chart's releases do not pile up until the retention.
				if !cl.isCurrent(r) && !now.Before(r.last.Add(m.cfg.SettleAfter)) {
					m.retire(c, r)
				}
				continue
			}
			if !cl.settles(r, m.cfg.SettleAfter, now) || archived != nil && !archived(r.key) {
				continue
			}
			// settleAlone leaves r dropped from the index; retire records
			// what goes with it.
			if v, ok := cl.settleAlone(r, byFirst, &m.cfg, now); ok {
				c.Settle = append(c.Settle, v)
				m.retire(c, r)
			}
		}
		if !more {
			cl.settleFrom = logEntry{} // the round is done: the next begins at the oldest
		}
	}
	m.forgetMails(c.Forget[from:])
	return len(c.Settle) - before, more
}

// settles reports whether r's verdict is final and r has been quiet long
// enough to be settled.
func (c *cluster) settles(r *rolloutState, after time.Duration, now time.Time) bool {
	// Quiet is at least since r's last evidence: most live rollouts are
	// recent, and need no look at their emitters' logs.
	if r.view == nil || !r.view.Terminal || now.Before(r.last.Add(after)) {
		return false
	}
	quiet := r.last
	for em, ev := range r.ev {
		if em.IsRelease() {
			// It moves on with its layer: a commit that does not change
			// it holds no release.
			continue
		}
		s, ok := c.logs[em].after(logEntry{ev.First, r.key.Hash})
		if !ok {
			return false // the emitter is still at this revision
		}
		if s.first.After(quiet) {
			quiet = s.first
		}
	}
	return !now.Before(quiet.Add(after))
}

// settleAlone drops r from the cluster's index when no other live view
// depends on it, and returns r's final view; otherwise it leaves the index
// as it was.
func (c *cluster) settleAlone(r *rolloutState, byFirst []*rolloutState, cfg *Config, now time.Time) (*View, bool) {
	deps := c.dependents(r, byFirst)
	before := make([]*View, len(deps))
	for i, d := range deps {
		before[i] = c.evaluate(d, cfg, now)
	}
	final := c.evaluate(r, cfg, now)
	c.drop(r.key.Hash)
	for i, d := range deps {
		if !reflect.DeepEqual(before[i], c.evaluate(d, cfg, now)) {
			c.restore(r)
			return nil, false
		}
	}
	// Their views did not change, but what their last evaluations kept
	// (incremental.go) may name r; the dependents are every rollout that
	// may read r.
	for _, d := range deps {
		c.recache(d, cfg)
	}
	return final, true
}

// dependents are the live rollouts whose view may read r: its neighbours in
// each of its emitters' logs (r replaced the one before, or is replaced by
// the one after), the ones before it back to the emitter's last report
// (for them r may be where the emitter moved on), and every rollout that expects one of r's layers without
// evidence on it and places itself, by its first evidence, between that
// layer's entry before r and r's (for it, r is what the layer moved to
// next: supersession).
//
// byFirst is the live set by first evidence (some may have left it since):
// only the rollouts that began before r's latest evidence are looked at,
// which in a pass that settles the oldest first are few.
func (c *cluster) dependents(r *rolloutState, byFirst []*rolloutState) []*rolloutState {
	seen := map[string]bool{r.key.Hash: true}
	var out []*rolloutState
	add := func(h string) {
		if !seen[h] {
			seen[h] = true
			out = append(out, c.rollouts[h])
		}
	}
	type span struct {
		layer  Emitter
		lo, hi logEntry
		hasLo  bool
	}
	var spans []span
	// On events alone, what the rollouts of r's family expect reads r
	// (family.go), and r may be what holds the family together.
	for _, q := range r.fam.members {
		if q.view != nil && !q.known {
			add(q.key.Hash)
		}
	}
	for em, ev := range r.ev {
		x := logEntry{ev.First, r.key.Hash}
		lg := c.logs[em]
		sp := span{layer: em, hi: x}
		// The ones before r, back to the first the emitter reported on: for
		// each, r may be the first report after it (movedOn), since
		// membership marks in between are not reports.
		i, _ := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
		for j := i - 1; j >= 0; j-- {
			p := lg.revs[j]
			add(p.hash)
			if j == i-1 {
				sp.lo, sp.hasLo = p, true
			}
			if c.rollouts[p.hash].ev[em].reported() {
				break
			}
		}
		if s, ok := lg.after(x); ok {
			add(s.hash)
		}
		if em.IsLayer() {
			spans = append(spans, sp)
		}
	}
	for _, o := range byFirst {
		if o.first.After(r.last) {
			break // after every entry of r: no span holds it
		}
		h := o.key.Hash
		if seen[h] || o.view == nil || c.rollouts[h] != o {
			continue
		}
		pos := o.start()
		for _, sp := range spans {
			if o.ev[sp.layer] != nil || pos.compare(sp.hi) >= 0 || sp.hasLo && pos.compare(sp.lo) <= 0 {
				continue
			}
			if expects(o.view, sp.layer) {
				add(h)
				break
			}
		}
	}
	return out
}

// expects reports whether v lists layer among its expected layers, which
// are in Emitter order.
func expects(v *View, layer Emitter) bool {
	name := layer.Layer()
	i := sort.Search(v.Layers.Len(), func(i int) bool { return compareLayerNames(v.Layers.At(i).Name, name) >= 0 })
	return i < v.Layers.Len() && v.Layers.At(i).Name == name
}

// byFirst lists the live rollouts by first evidence, then hash.
func (c *cluster) byFirst() []*rolloutState {
	out := make([]*rolloutState, 0, len(c.rollouts))
	for _, r := range c.rollouts {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *rolloutState) int { return a.start().compare(b.start()) })
	return out
}

// restore puts a rollout that drop removed back into the index.
func (c *cluster) restore(r *rolloutState) {
	c.rollouts[r.key.Hash] = r
	for em, ev := range r.ev {
		c.joinLog(r, em)
		lg := c.logs[em]
		if lg == nil {
			lg = &emitterLog{emitter: em}
			c.logs[em] = lg
		}
		c.insertEntry(lg, logEntry{ev.First, r.key.Hash})
		c.hold(r, &lg.emitter, ev)
	}
	c.setCache(r, r.cache)
}

// retire removes r from memory as part of c (drop, when it is still in the
// index): its evidence is deleted, each of its emitters' floors is raised
// to it, and its view is unpublished once c is committed.
func (m *Model) retire(c *Change, r *rolloutState) {
	cl := m.clusters[r.key.Cluster]
	for em, ev := range r.ev {
		c.Deletes = append(c.Deletes, EvidenceKey{r.key, r.seq, em})
		if r.view == nil {
			// Never published (read): a floor would tell that layers read
			// its sources.
			continue
		}
		x := logEntry{ev.First, r.key.Hash}
		if f, ok := cl.floors[em]; !ok || f.compare(x) < 0 {
			cl.floors[em] = x
			if c.Floors == nil {
				c.Floors = map[FloorKey]Floor{}
			}
			c.Floors[FloorKey{cl.name, em}] = Floor{First: x.first, Hash: x.hash}
		}
	}
	cl.drop(r.key.Hash)
	c.Forget = append(c.Forget, r.key)
}

// forgetMails drops the mail keys of rollouts no longer in memory: no
// evidence can make their mails due again.
func (m *Model) forgetMails(gone []Key) {
	if len(gone) == 0 {
		return
	}
	forget := make(map[Key]bool, len(gone))
	for _, k := range gone {
		forget[k] = true
		delete(m.stuckMailed, k)
	}
	for key := range m.mailed {
		if mk, err := ParseMailKey(key); err == nil && forget[mk.Rollout] {
			delete(m.mailed, key)
		}
	}
}

// beforeFloor reports whether o would put a revision the emitter has no
// evidence on yet (in memory or earlier in the batch) where the entry
// before it in the emitter's history is settled: older than the floor, or
// between the floor and the next live entry. Such a revision's predecessor,
// whose layers it must reach, is no longer known.
func (c *cluster) beforeFloor(o *Observation, inBatch bool) bool {
	f, ok := c.floors[o.Emitter]
	if !ok || inBatch {
		return false
	}
	if r := c.rollouts[o.Hash]; r != nil && r.ev[o.Emitter] != nil {
		return false
	}
	x := logEntry{o.At, o.Hash}
	p, live := c.logs[o.Emitter].prev(x)
	return !live || p.compare(f) < 0
}
