package rollout

import (
	"slices"
	"strings"
	"time"
)

// Key identifies a rollout: one revision on one cluster.
type Key struct {
	Cluster string
	Hash    string
}

// EvidenceKey identifies one Evidence record. Seq numbers rollouts in the
// order they were first seen; the store orders records by it, so the
// records of the rollouts under way, which most writes touch, are adjacent.
type EvidenceKey struct {
	Key
	Seq     uint64
	Emitter Emitter
}

// cluster is the engine's index of one cluster's evidence. Only the engine
// goroutine touches it.
type cluster struct {
	name     string
	rollouts map[string]*rolloutState // by hash: the live set
	logs     map[Emitter]*emitterLog  // entries of live rollouts only
	floors   map[Emitter]logEntry     // newest settled entry of each log
}

type rolloutState struct {
	key   Key
	seq   uint64
	ev    map[Emitter]*Evidence
	first time.Time // earliest evidence of any emitter
	last  time.Time // latest evidence of any emitter
	view  *View     // last published
}

// emitterLog is the revisions one emitter reported, ordered by the Flux time
// of their first evidence (ties by hash), which is the order the emitter
// moved through them.
type emitterLog struct {
	revs []logEntry
}

type logEntry struct {
	first time.Time
	hash  string
}

func (a logEntry) compare(b logEntry) int {
	if c := a.first.Compare(b.first); c != 0 {
		return c
	}
	return strings.Compare(a.hash, b.hash)
}

func newCluster(name string) *cluster {
	return &cluster{name: name, rollouts: map[string]*rolloutState{}, logs: map[Emitter]*emitterLog{}, floors: map[Emitter]logEntry{}}
}

// rollout returns the rollout of hash, creating it with seq when new.
func (c *cluster) rollout(hash string, seq uint64) *rolloutState {
	r := c.rollouts[hash]
	if r == nil {
		r = &rolloutState{key: Key{c.name, hash}, seq: seq, ev: map[Emitter]*Evidence{}}
		c.rollouts[hash] = r
	}
	return r
}

// set installs ev as the evidence of (hash, e), keeping the logs ordered.
// It reports whether other rollouts may see the change: the emitter is new
// to the rollout, or its first evidence or revision spelling changed. Other
// changes (a layer progressing, failing, succeeding) concern this rollout
// alone.
//
// Moving or inserting an entry in an emitter's log changes its neighbours'
// neighbours: those around the old and the new place are added to dirty
// (when not nil) at once, while the places are known; other changes in the
// same batch may move entries again before affected runs.
func (c *cluster) set(hash string, e Emitter, ev *Evidence, dirty map[Key]struct{}) (visible bool) {
	r := c.rollouts[hash]
	old := r.ev[e]
	r.ev[e] = ev
	if r.first.IsZero() || ev.First.Before(r.first) {
		r.first = ev.First
	}
	if ev.Last.After(r.last) {
		r.last = ev.Last
	}
	lg := c.logs[e]
	if lg == nil {
		lg = &emitterLog{}
		c.logs[e] = lg
	}
	if old != nil {
		if old.First.Equal(ev.First) {
			// A layer that was only told to apply this revision (a
			// membership mark) now reports on it: it has moved on from the
			// one it was applying before (see movedOn).
			return old.Revision != ev.Revision || !old.reported() && ev.reported()
		}
		c.dirtyAround(lg, logEntry{old.First, hash}, dirty)
		lg.remove(logEntry{old.First, hash})
	}
	x := logEntry{ev.First, hash}
	lg.insert(x)
	c.dirtyAround(lg, x, dirty)
	return true
}

// dirtyAround adds to dirty the rollouts just before and after x in lg.
func (c *cluster) dirtyAround(lg *emitterLog, x logEntry, dirty map[Key]struct{}) {
	if dirty == nil {
		return
	}
	if p := lg.before(x); p != "" {
		dirty[Key{c.name, p}] = struct{}{}
	}
	if s, ok := lg.after(x); ok {
		dirty[Key{c.name, s.hash}] = struct{}{}
	}
}

// drop forgets a rollout entirely.
func (c *cluster) drop(hash string) {
	r := c.rollouts[hash]
	if r == nil {
		return
	}
	for e, ev := range r.ev {
		if lg := c.logs[e]; lg != nil {
			lg.remove(logEntry{ev.First, hash})
			if len(lg.revs) == 0 {
				delete(c.logs, e)
			}
		}
	}
	delete(c.rollouts, hash)
}

func (lg *emitterLog) insert(x logEntry) {
	i, found := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	if !found {
		lg.revs = slices.Insert(lg.revs, i, x)
	}
}

func (lg *emitterLog) remove(x logEntry) {
	if i, found := slices.BinarySearchFunc(lg.revs, x, logEntry.compare); found {
		lg.revs = slices.Delete(lg.revs, i, i+1)
	}
}

// before returns the revision the emitter reported just before x, or "".
func (lg *emitterLog) before(x logEntry) string {
	p, _ := lg.prev(x)
	return p.hash
}

// prev is the entry just before x.
func (lg *emitterLog) prev(x logEntry) (logEntry, bool) {
	if lg == nil {
		return logEntry{}, false
	}
	i, _ := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	if i == 0 {
		return logEntry{}, false
	}
	return lg.revs[i-1], true
}

// after returns the first revision the emitter reported after x.
func (lg *emitterLog) after(x logEntry) (logEntry, bool) {
	if lg == nil {
		return logEntry{}, false
	}
	i, found := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	if found {
		i++
	}
	if i >= len(lg.revs) {
		return logEntry{}, false
	}
	return lg.revs[i], true
}

// latest is the newest revision the emitter reported.
func (lg *emitterLog) latest() string {
	if lg == nil || len(lg.revs) == 0 {
		return ""
	}
	return lg.revs[len(lg.revs)-1].hash
}

// position is where a rollout sits in an emitter's log: at its own evidence
// when it has some, else where its first evidence anywhere would go.
func (r *rolloutState) position(e Emitter) logEntry {
	if ev := r.ev[e]; ev != nil {
		return logEntry{ev.First, r.key.Hash}
	}
	return r.start()
}

// start is where the rollout's first evidence anywhere places it.
func (r *rolloutState) start() logEntry { return logEntry{r.first, r.key.Hash} }

// affected adds to dirty the rollouts whose view may change when the
// evidence of rollout hash changed, visibly to others (see set) on the
// given emitters: the rollout itself and, when others can see the change,
// its predecessor and successor on each of its emitters (supersession,
// expected layers), and the successors of its predecessors on the changed
// emitters (for whom such an emitter now carries a newer revision, or for
// whom hash is a predecessor now carried by it).
func (c *cluster) affected(hash string, changed []Emitter, dirty map[Key]struct{}) {
	r := c.rollouts[hash]
	if r == nil {
		return
	}
	dirty[r.key] = struct{}{}
	if len(changed) == 0 {
		return
	}
	seen := map[string]bool{}
	succOf := func(h string) {
		p := c.rollouts[h]
		if p == nil || seen[h] {
			return
		}
		seen[h] = true
		for pe := range p.ev {
			if s, ok := c.logs[pe].after(p.position(pe)); ok {
				dirty[Key{c.name, s.hash}] = struct{}{}
			}
		}
	}
	for re := range r.ev {
		pos := r.position(re)
		if p := c.logs[re].before(pos); p != "" {
			dirty[Key{c.name, p}] = struct{}{}
		}
		if s, ok := c.logs[re].after(pos); ok {
			dirty[Key{c.name, s.hash}] = struct{}{}
		}
	}
	succOf(hash)
	for _, e := range changed {
		if p := c.logs[e].before(r.position(e)); p != "" {
			succOf(p)
		}
		if p := c.reportedBefore(e, r.position(e)); p != "" {
			dirty[Key{c.name, p}] = struct{}{}
		}
	}
}

// reportedBefore is the last revision before x that emitter e reported on,
// skipping those it was only told to apply: the one it may have been
// applying until now.
func (c *cluster) reportedBefore(e Emitter, x logEntry) string {
	lg := c.logs[e]
	if lg == nil {
		return ""
	}
	i, _ := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	for i--; i >= 0; i-- {
		h := lg.revs[i].hash
		if ev := c.rollouts[h].ev[e]; ev != nil && ev.reported() {
			return h
		}
	}
	return ""
}

// movedOn reports whether emitter e reported on a revision after r's: a
// membership mark is not a report, it says what the layer must apply, not
// that it started.
func (c *cluster) movedOn(e Emitter, r *rolloutState) bool {
	x := r.position(e)
	for {
		s, ok := c.logs[e].after(x)
		if !ok {
			return false
		}
		if ev := c.rollouts[s.hash].ev[e]; ev != nil && ev.reported() {
			return true
		}
		x = s
	}
}
