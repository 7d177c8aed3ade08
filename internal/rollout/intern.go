package rollout

// A decoded event's strings are its own copies. Kept in evidence as they
// came, a busy fleet's live set holds the same names, kinds, reasons and
// revision spellings thousands of times over; set makes new evidence share
// the strings the index already holds instead (see BenchmarkLiveHeap).

// maxWords bounds the words a cluster shares. Kinds, namespaces and
// reasons are a small vocabulary in practice, but they come from the wire:
// once full, new ones are kept as they came.
const maxWords = 512

// word returns the cluster's copy of s, adding s when there is room.
func (c *cluster) word(s string) string {
	if w, ok := c.words[s]; ok {
		return w
	}
	if len(c.words) < maxWords {
		c.words[s] = s
	}
	return s
}

// share makes e and ev use the strings the cluster already holds for them,
// and returns e so; lg is e's log, nil when e has none yet.
func (c *cluster) share(r *rolloutState, lg *emitterLog, e Emitter, ev *Evidence) Emitter {
	if lg != nil {
		e = lg.emitter
	} else {
		e.Kind, e.Namespace = c.word(e.Kind), c.word(e.Namespace)
	}
	if r.revision == "" {
		r.revision = ev.Revision
	} else if ev.Revision == r.revision {
		ev.Revision = r.revision
	}
	for _, m := range []*Mark{ev.Progress, ev.Succeeded} {
		if m != nil {
			m.Reason = c.word(m.Reason)
		}
	}
	for i := range ev.Failures {
		ev.Failures[i].Reason = c.word(ev.Failures[i].Reason)
	}
	for i, h := range ev.holds() {
		// A hold names its release as the layer's event did: its own
		// copy, one per live rollout of the release.
		if rl := c.logs[h.Release]; rl != nil {
			ev.Inside.Holds[i].Release = rl.emitter
		} else {
			ev.Inside.Holds[i].Release.Kind, ev.Inside.Holds[i].Release.Namespace = c.word(h.Release.Kind), c.word(h.Release.Namespace)
		}
	}
	return e
}
