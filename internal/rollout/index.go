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
	rollouts map[string]*rolloutState               // by hash: the live set
	logs     map[Emitter]*emitterLog                // entries of live rollouts only
	floors   map[Emitter]logEntry                   // newest settled entry of each log
	silent   map[Emitter]map[*rolloutState]struct{} // rollouts expecting each layer without evidence on it
	holds    map[Emitter][]holdEntry                // by release: the live holds of it, in order (attribute)

	settleFrom logEntry // where the next settle pass goes on, zero: at the oldest

	words map[string]string // shared kinds, namespaces and reasons (intern.go)
}

type rolloutState struct {
	key Key
	seq uint64
	ev  map[Emitter]*Evidence
	// revision is a spelling of the revision, shared by the evidence that
	// spells it so (intern.go).
	revision string
	first    time.Time // earliest evidence of any emitter
	last     time.Time // latest evidence of any emitter
	view     *View     // last published
	evalAt   time.Time // the now view was evaluated at

	folds                       // of the evidence, kept as it arrives
	next  map[*rolloutState]int // rollouts just after one of its log entries, with how many
	cache *evalCache            // the last evaluation, to patch (incremental.go)
	fam   *family               // the live rollouts of its source, as far as events tell (family.go)
}

// emitterLog is the revisions one emitter reported, ordered by the Flux time
// of their first evidence (ties by hash), which is the order the emitter
// moved through them.
type emitterLog struct {
	emitter Emitter // whose: the strings its evidence shares (intern.go)
	revs    []logEntry
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

// NewestFirst orders one cluster's rollouts as the model does, the newest
// first: by first evidence, then, within one instant (Flux stamps events
// to the second), by hash, the greater the newer. The list of rollouts
// (engine's) breaks that tie the other way; what runs now must not.
func NewestFirst(a, b *View) int {
	return logEntry{b.FirstSeen, b.Hash}.compare(logEntry{a.FirstSeen, a.Hash})
}

func newCluster(name string) *cluster {
	return &cluster{name: name, rollouts: map[string]*rolloutState{}, logs: map[Emitter]*emitterLog{}, floors: map[Emitter]logEntry{},
		silent: map[Emitter]map[*rolloutState]struct{}{}, holds: map[Emitter][]holdEntry{}, words: map[string]string{}}
}

// link counts, for each rollout, the rollouts whose entries follow its own
// in some log: they are the ones that read it as a predecessor.
func (c *cluster) link(a, b logEntry, d int) {
	ra, rb := c.rollouts[a.hash], c.rollouts[b.hash]
	if ra == nil || rb == nil {
		return
	}
	if ra.next == nil {
		ra.next = map[*rolloutState]int{}
	}
	if ra.next[rb] += d; ra.next[rb] <= 0 {
		delete(ra.next, rb)
	}
}

// rollout returns the rollout of hash, creating it with seq when new.
func (c *cluster) rollout(hash string, seq uint64) *rolloutState {
	r := c.rollouts[hash]
	if r == nil {
		r = &rolloutState{key: Key{c.name, hash}, seq: seq, ev: map[Emitter]*Evidence{}}
		r.fam = newFamily(r)
		c.rollouts[hash] = r
	}
	return r
}

// set installs ev as the evidence of (hash, e), keeping the logs and the
// rollout's folds up to date, and records in dirty and visible (when not
// nil) what the change may affect (see dirtySet, visibleSet). Other
// rollouts may see the change when the emitter is new to the rollout, its
// first evidence or revision spelling changed, or it reported for the
// first time. Other changes (a layer progressing, failing, succeeding)
// concern this rollout alone.
func (c *cluster) set(hash string, e Emitter, ev *Evidence, dirty dirtySet, visible visibleSet) {
	r := c.rollouts[hash]
	lg := c.logs[e]
	e = c.share(r, lg, e, ev)
	if lg == nil {
		lg = &emitterLog{emitter: e}
		c.logs[e] = lg
	}
	old := r.ev[e]
	// An emitter's revisions are of one source: its first report on r
	// joins r's family with theirs.
	alone := len(r.fam.members) == 1
	merged := old == nil && c.joinLog(r, e)
	r.ev[e] = ev
	if old == nil || !slices.Equal(old.holds(), ev.holds()) {
		c.unhold(r, &lg.emitter, old)
		c.hold(r, &lg.emitter, ev)
	}
	started := !r.first.IsZero() && ev.First.Before(r.first) // its start moved earlier
	if started {
		// Every silent layer's place moved, and so did r's in the eyes of
		// every rollout that compares starts with it.
		dirty.moved(c, r)
	}
	if r.first.IsZero() || started {
		r.first = ev.First
		r.fam.started(r)
	}
	if old == nil && e.IsLayer() {
		r.fam.addLayer(e)
	}
	if ev.Last.After(r.last) {
		r.last = ev.Last
	}
	source := r.source
	if r.folds.add(e, ev) {
		dirty.readers(c, r) // it shows as superseded_by in their views
	}
	sourced := source != r.source // its source moved
	// What r expects, on events alone, reads its family (family.go): read
	// it afresh when it joined one, or its start or its source moved.
	if (merged || sourced || started) && !r.known {
		dirty.full(r)
	}
	// What the newer rollouts of r's family read of r: its layers, its
	// start and its source.
	switch {
	case merged && !alone:
		// Two families became one (rare: a revision that reached only
		// some layers reported by another): each may now read the other.
		dirty.familyChanged(r, logEntry{}, endOfLogs(), Emitter{})
	case merged && !sourced && e.IsLayer() && onlyLayer(r, e):
		// A new revision joined its source's family by its first layer:
		// of the rollouts after it, what they read of that layer. Its
		// start, before every layer of it but e, tells them nothing more
		// (latestBefore).
		dirty.reportChanged(r, lg, old, ev)
	case merged || sourced:
		dirty.familyChanged(r, r.start(), endOfLogs(), Emitter{})
	default:
		if started {
			// Those that began since its start: those that began after its
			// every entry read its entries, of which only e's may have
			// moved (reportChanged), and not the start of a revision that
			// precedes them wherever it reported (latestBefore).
			dirty.familyBetween(r, r.start(), logEntry{r.last, r.key.Hash})
		}
		dirty.reportChanged(r, lg, old, ev)
	}

	var oldMember *Member
	if old != nil {
		oldMember = old.Member
	}
	if !sameMember(oldMember, ev.Member) || old.expectedByCluster() != ev.expectedByCluster() {
		dirty.full(r) // what r expects may change
	} else {
		dirty.slot(r, e)
	}
	// The rollouts after r read more of it than its evidence on e when
	// its start or its source moved (successors).
	seen := func() { visible.add(r, e, started || sourced) }
	if old != nil {
		if old.First.Equal(ev.First) {
			// A layer that was only told to apply this revision (a
			// membership mark) now reports on it: it has moved on from the
			// one it was applying before (see movedOn).
			if old.Revision != ev.Revision || !old.reported() && ev.reported() {
				c.dirtyAround(lg, e, logEntry{ev.First, hash}, stays, dirty)
				seen()
			}
			return
		}
		was := logEntry{old.First, hash}
		pred := lg.before(was)
		c.dirtyAround(lg, e, was, removed, dirty)
		c.removeEntry(lg, was)
		x := logEntry{ev.First, hash}
		c.insertEntry(lg, x)
		c.dirtyAround(lg, e, x, inserted, dirty)
		if lg.before(x) != pred {
			dirty.full(r) // it now follows another revision: what it replaced changed
		}
		seen()
		return
	}
	x := logEntry{ev.First, hash}
	c.insertEntry(lg, x)
	c.dirtyAround(lg, e, x, inserted, dirty)
	// r's first report on e: the revision before it there is one more it
	// replaced (predecessor).
	dirty.predMoved(r, e, "", lg.before(x))
	seen()
}

// reportChanged records what a change to a layer's report on r (old to
// ev, in its log lg) changes for the rollouts of r's family that began
// after it.
func (d dirtySet) reportChanged(r *rolloutState, lg *emitterLog, old, ev *Evidence) {
	e := lg.emitter
	switch {
	case !e.IsLayer():
	case old == nil:
		// A layer's report on r: the rollouts after r it did not report
		// expect it, at r if r is the latest it reported before them, up
		// to its next report, which is the latest before those after it.
		d.familyChanged(r, r.start(), lg.next(logEntry{ev.First, r.key.Hash}), e)
	case !old.First.Equal(ev.First):
		// Its report moved in its log: for the rollouts that began since
		// the earlier of its two places, it may be at r now, or no more.
		d.familyChanged(r, logEntry{first: ev.First}, endOfLogs(), e)
	}
}

// onlyLayer reports whether e is the one layer r has evidence on.
func onlyLayer(r *rolloutState, e Emitter) bool {
	for o := range r.ev {
		if o.IsLayer() && o != e {
			return false
		}
	}
	return true
}

func sameMember(a, b *Member) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Mark == b.Mark && slices.Equal(a.DependsOn, b.DependsOn)
}

// folds are what a view's header says of a rollout as a whole, folded
// over its evidence as it arrives so that the header costs nothing per
// layer. Each only ever improves (an emitter's evidence only grows), so
// the order of arrival does not matter.
type folds struct {
	rev                string  // the revision's display spelling
	origin, originHash string  // the smallest origin revision
	source             Ref     // the smallest source
	subject            string  // the smallest subject a source gave
	known              bool    // the cluster marked a layer's membership
	layered            bool    // a layer or a release has evidence: the rollout is one (read)
	routes             routing // who the Alerts route mails to
}

// add folds one emitter's evidence in and reports whether the display
// revision changed.
func (f *folds) add(e Emitter, ev *Evidence) (revChanged bool) {
	switch {
	case f.rev == "":
		f.rev = ev.Revision
	case ev.Revision != f.rev && betterRevision(ev.Revision, f.rev):
		f.rev, revChanged = ev.Revision, true
	}
	d := ev.Details()
	if d.OriginHash != "" && (f.originHash == "" || d.OriginHash < f.originHash || d.OriginHash == f.originHash && d.Origin < f.origin) {
		f.origin, f.originHash = d.Origin, d.OriginHash
	}
	if e.IsSource() {
		if r := e.Ref(); f.source == (Ref{}) || r != f.source && r.String() < f.source.String() {
			f.source = r
		}
		if d.Subject != "" && (f.subject == "" || d.Subject < f.subject) {
			f.subject = d.Subject
		}
	}
	if e.IsLayer() && ev.Member != nil {
		f.known = true
	}
	if !e.IsSource() {
		f.layered = true
	}
	f.routes.add(e, d.MailTo)
	return revChanged
}

// insertEntry and removeEntry change a log and the links it implies.
func (c *cluster) insertEntry(lg *emitterLog, x logEntry) {
	i, found := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	if found {
		return
	}
	if i > 0 && i < len(lg.revs) {
		c.link(lg.revs[i-1], lg.revs[i], -1)
	}
	if i > 0 {
		c.link(lg.revs[i-1], x, 1)
	}
	if i < len(lg.revs) {
		c.link(x, lg.revs[i], 1)
	}
	lg.revs = slices.Insert(lg.revs, i, x)
}

func (c *cluster) removeEntry(lg *emitterLog, x logEntry) {
	i, found := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	if !found {
		return
	}
	if i > 0 {
		c.link(lg.revs[i-1], x, -1)
	}
	if i+1 < len(lg.revs) {
		c.link(x, lg.revs[i+1], -1)
	}
	if i > 0 && i+1 < len(lg.revs) {
		c.link(lg.revs[i-1], lg.revs[i+1], 1)
	}
	lg.revs = slices.Delete(lg.revs, i, i+1)
}

// entryChange is what happened to an entry of a log (dirtyAround).
type entryChange int

const (
	inserted entryChange = iota
	removed
	stays // in place, its revision's spelling or its report changed
)

// dirtyAround records what inserting, removing or changing x in e's log
// lg changes: for the entries before it, back to the last one the emitter
// reported on, the revision the layer moved to next (and whether it moved
// on); for the one after it, its predecessor; and for every rollout silent
// on e that began between x's neighbours, the revision e moved to next.
func (c *cluster) dirtyAround(lg *emitterLog, e Emitter, x logEntry, how entryChange, dirty dirtySet) {
	if dirty == nil {
		return
	}
	// x is in lg: dirtyAround runs after an insertion, before a removal.
	i, _ := slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
	var lo logEntry
	if i > 0 {
		lo = lg.revs[i-1]
	}
	if j := i + 1; j < len(lg.revs) {
		// The one after x replaced x, or replaced the one before x and
		// no more: one of its predecessors moved, by one emitter.
		next := c.rollouts[lg.revs[j].hash]
		switch {
		case how == inserted && !e.IsRelease():
			dirty.predMoved(next, e, lo.hash, x.hash)
		case how == removed && !e.IsRelease():
			dirty.predMoved(next, e, x.hash, lo.hash)
		default:
			// A release's log (no rollout replaces a revision on a
			// release: predecessor), or x changed in place.
			dirty.full(next)
		}
	}
	for k := i - 1; k >= 0; k-- {
		p := c.rollouts[lg.revs[k].hash]
		dirty.slot(p, e)
		if p.ev[e].reported() {
			break
		}
	}
	// For the rollouts silent on e that began between the entry before x
	// and x, the entry after their start is x, or was.
	c.silentBetween(e, lo, x, func(q *rolloutState) { dirty.slot(q, e) })
}

// silentBetween calls f for every rollout that expects e without evidence
// on it and began after lo and before x. The index holds every rollout
// with a kept evaluation. The others read everything at their next
// evaluation and are missed safely: a rollout never evaluated is dirty in
// the batch that created it, and one whose evaluation was dropped
// (evictCaches) had no silent layer, and gains one only by a change that
// rebuilds it.
func (c *cluster) silentBetween(e Emitter, lo, x logEntry, f func(*rolloutState)) {
	for q := range c.silent[e] {
		if st := q.start(); lo.compare(st) < 0 && st.compare(x) < 0 && q.ev[e] == nil {
			f(q)
		}
	}
}

// read reports whether r is a rollout people are told of: a layer (or a
// release in one) has evidence on its revision, or a layer has reported a
// revision of one of its sources before (while live, or settled since: only
// such a source's revisions are ever published, and settle). A source no
// layer reads (a HelmRelease's chart) makes no rollout of its own.
func (c *cluster) read(r *rolloutState) bool {
	if r.layered {
		return true
	}
	for e := range r.ev {
		if !e.IsSource() {
			continue
		}
		if _, ok := c.floors[e]; ok {
			return true
		}
		for _, x := range c.logs[e].revs {
			if c.rollouts[x.hash].layered {
				return true
			}
		}
	}
	return false
}

// drop forgets a rollout entirely.
func (c *cluster) drop(hash string) {
	r := c.rollouts[hash]
	if r == nil {
		return
	}
	for e, ev := range r.ev {
		if lg := c.logs[e]; lg != nil {
			c.removeEntry(lg, logEntry{ev.First, hash})
			if len(lg.revs) == 0 {
				delete(c.logs, e)
			}
		}
		c.unhold(r, &e, ev)
	}
	c.unsilence(r)
	delete(c.rollouts, hash)
	c.leave(r)
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
	i, _ := lg.search(x)
	if i == 0 {
		return logEntry{}, false
	}
	return lg.revs[i-1], true
}

// search is where x is, or would go, in the log, as
// slices.BinarySearchFunc says; at once when x is after every entry: a
// new revision's place in every log, which its first evaluation asks of
// each layer of its family (1,000 binary searches at 1,000 layers).
func (lg *emitterLog) search(x logEntry) (int, bool) {
	if n := len(lg.revs); n == 0 || lg.revs[n-1].compare(x) < 0 {
		return n, false
	}
	return slices.BinarySearchFunc(lg.revs, x, logEntry.compare)
}

// after returns the first revision the emitter reported after x.
func (lg *emitterLog) after(x logEntry) (logEntry, bool) {
	if lg == nil {
		return logEntry{}, false
	}
	i, found := lg.search(x)
	if found {
		i++
	}
	if i >= len(lg.revs) {
		return logEntry{}, false
	}
	return lg.revs[i], true
}

// endOfLogs is after every entry of every log.
func endOfLogs() logEntry { return logEntry{first: time.Unix(1<<40, 0)} }

// next is the entry just after x, x being in the log or not; endOfLogs
// when there is none.
func (lg *emitterLog) next(x logEntry) logEntry {
	if s, ok := lg.after(x); ok {
		return s
	}
	return endOfLogs()
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
