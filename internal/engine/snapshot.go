package engine

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// ErrNotFound is returned when no rollout matches the query.
var ErrNotFound = errors.New("revision not seen")

// AmbiguousError is returned when the query matches more than one rollout.
type AmbiguousError struct{ Matches []rollout.Key }

func (e *AmbiguousError) Error() string {
	parts := make([]string, len(e.Matches))
	for i, k := range e.Matches {
		parts[i] = k.Cluster + "/" + k.Hash
	}
	return "ambiguous revision: matches " + strings.Join(parts, ", ")
}

// Query asks for a rollout by hash (or hash prefix), optionally on one
// cluster. A hash also matches a rollout whose origin revision has it, so
// a pipeline that knows only the git commit finds an OCI rollout.
type Query struct {
	Cluster string // "" for any
	Hash    string // lowercase hex
	Prefix  bool
}

// snapshot is the read model: immutable views behind a short lock, and
// channels that wake long-polling readers when a view changes.
type snapshot struct {
	mu    sync.RWMutex
	views map[rollout.Key]*rollout.View
	// byHash and byOrigin index views by their hash and their origin
	// revision's, so that a lookup reads the views its query can name
	// instead of every live one.
	byHash, byOrigin hashIndex
	watch            map[rollout.Key]chan struct{}
	created          chan struct{} // closed when a rollout appears
	ready            atomic.Bool
	// clusters are those the archive may hold rollouts of: those of every
	// view ever shown, and, once archived is set, those it held when read.
	// A rollout is shown live before it settles, so a full hash live on
	// every one of them has no settled rollout to read.
	clusters map[string]struct{}
	archived atomic.Bool
	// hist keeps each cluster's latest settled rollouts (Histories).
	hist histories
	// gen counts the publishes: what is read of the rollouts may differ
	// only across a change of it.
	gen atomic.Uint64
}

func newSnapshot() *snapshot {
	return &snapshot{views: map[rollout.Key]*rollout.View{}, byHash: hashIndex{}, byOrigin: hashIndex{},
		watch: map[rollout.Key]chan struct{}{}, created: make(chan struct{}), clusters: map[string]struct{}{}}
}

// hashIndex finds keys by the first flux.MinPrefix digits of a hash. A
// query names at least as many (the API takes no fewer), so the keys
// sharing its first digits are all it can match, usually one; a shorter
// one is answered by a scan.
type hashIndex map[string][]rollout.Key

func indexed(hash string) string { return hash[:min(len(hash), flux.MinPrefix)] }

func (x hashIndex) add(hash string, k rollout.Key) {
	p := indexed(hash)
	x[p] = append(x[p], k)
}

func (x hashIndex) remove(hash string, k rollout.Key) {
	p := indexed(hash)
	if ks := slices.DeleteFunc(x[p], func(o rollout.Key) bool { return o == k }); len(ks) > 0 {
		x[p] = ks
	} else {
		delete(x, p)
	}
}

// index indexes v in place of old (either may be nil).
func (s *snapshot) index(old, v *rollout.View) {
	switch {
	case old == nil:
		s.byHash.add(v.Hash, v.Key())
	case v == nil:
		s.byHash.remove(old.Hash, old.Key())
	}
	if old != nil && old.OriginHash != "" && (v == nil || v.OriginHash != old.OriginHash) {
		s.byOrigin.remove(old.OriginHash, old.Key())
	}
	if v != nil && v.OriginHash != "" && (old == nil || v.OriginHash != old.OriginHash) {
		s.byOrigin.add(v.OriginHash, v.Key())
	}
}

func (s *snapshot) setReady(b bool) { s.ready.Store(b) }

// watching is the channel closed when k's view next changes; s.mu held.
func (s *snapshot) watching(k rollout.Key) chan struct{} {
	ch := s.watch[k]
	if ch == nil {
		ch = make(chan struct{})
		s.watch[k] = ch
	}
	return ch
}

func (s *snapshot) publish(views []*rollout.View, removed []rollout.Key, replace bool) {
	if len(views) == 0 && len(removed) == 0 && !replace {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen.Add(1)
	if replace {
		clear(s.views)
		clear(s.byHash)
		clear(s.byOrigin)
		// What settled while these views were not followed one by one
		// is known from the archive again, read at the next lookup.
		s.archived.Store(false)
		s.hist.reset()
	}
	appeared := false
	s.hist.touched(views, removed)
	for _, v := range views {
		k := v.Key()
		old := s.views[k]
		if old == nil {
			appeared = true
			s.clusters[k.Cluster] = struct{}{}
		}
		s.index(old, v)
		s.views[k] = v
		if ch, ok := s.watch[k]; ok {
			close(ch)
			delete(s.watch, k)
		}
	}
	for _, k := range removed {
		// A follower may learn of a rollout only as it goes.
		s.clusters[k.Cluster] = struct{}{}
		old := s.views[k]
		if old != nil {
			s.index(old, nil)
		}
		s.hist.gone(old)
		delete(s.views, k)
		if ch, ok := s.watch[k]; ok {
			close(ch)
			delete(s.watch, k)
		}
	}
	if appeared {
		close(s.created)
		s.created = make(chan struct{})
	}
}

// Reader answers reads: the live rollouts from a snapshot of their views,
// the settled ones from the archive. The engine keeps one up to date with
// what it commits; a replica that runs no engine keeps one from the
// views another replica's engine committed (Publish).
type Reader struct {
	snap    *snapshot
	archive Archive
	log     *slog.Logger
}

// NewReader returns a reader of an empty snapshot and archive.
func NewReader(archive Archive, log *slog.Logger) *Reader {
	return &Reader{snap: newSnapshot(), archive: archive, log: log}
}

// Publish shows views in place of the ones before, and removes the
// rollouts removed (settled or collected); replace shows views alone.
func (r *Reader) Publish(views []*rollout.View, removed []rollout.Key, replace bool) {
	r.snap.publish(views, removed, replace)
}

// SetReady says whether the reader shows the state as it is (readiness).
func (r *Reader) SetReady(b bool) { r.snap.setReady(b) }

// Generation changes whenever what the reader shows may have: a cache
// of something read from it holds while it stays the same.
func (r *Reader) Generation() uint64 { return r.snap.gen.Load() }

// Views returns every live rollout's view.
func (r *Reader) Views() []*rollout.View {
	r.snap.mu.RLock()
	defer r.snap.mu.RUnlock()
	return slices.Collect(maps.Values(r.snap.views))
}

// Ready reports whether the engine is running on loaded state.
func (r *Reader) Ready() bool { return r.snap.ready.Load() }

// Get returns the view of one rollout, live or settled, or nil (also
// when the archive cannot be read: logged).
func (r *Reader) Get(k rollout.Key) *rollout.View {
	v, err := r.get(k)
	if err != nil {
		r.log.Error("read settled rollout", "cluster", k.Cluster, "hash", k.Hash, "err", err)
	}
	return v
}

// get is Get saying why the archive could not be read: a lookup answers
// that, not "not found".
func (r *Reader) get(k rollout.Key) (*rollout.View, error) {
	r.snap.mu.RLock()
	v := r.snap.views[k]
	r.snap.mu.RUnlock()
	if v != nil {
		return v, nil
	}
	// A rollout leaves the snapshot only after its settled view was
	// committed: a miss here is a miss in both, or a hit in the archive.
	return r.archive.Settled(k)
}

// maxMatches bounds the rollouts an ambiguous query lists.
const maxMatches = 16

// Lookup finds the one rollout a query names, live or settled. A commit
// rebuilt into several artifacts on one cluster is one verdict there: the
// newest artifact's rollout (perCommit).
func (r *Reader) Lookup(q Query) (*rollout.View, error) {
	found, err := r.matching(q, false)
	if err != nil {
		return nil, err
	}
	if len(found) == 1 { // nearly every query: one rollout, nothing to group
		for k, v := range found {
			if v == nil {
				if v, err = r.get(k); err != nil {
					return nil, err
				} else if v == nil {
					return nil, ErrNotFound
				}
			}
			return v, nil
		}
	}
	views, commits, err := r.perCommit(found, q)
	switch {
	case err != nil:
		return nil, err
	case len(views) > 1 || commits > 1:
		return nil, ambiguous(found)
	case len(views) == 0:
		return nil, ErrNotFound
	}
	return views[0], nil
}

// LookupAll finds the rollouts of the one commit a query names, on every
// cluster that has it (the query's cluster is ignored), one per cluster,
// sorted by cluster. A prefix that names several commits is ambiguous.
func (r *Reader) LookupAll(q Query) ([]*rollout.View, error) {
	q.Cluster = ""
	// On one cluster the commit may be a git rollout, on another an OCI
	// rollout whose origin revision it is: both count.
	found, err := r.matching(q, true)
	if err != nil {
		return nil, err
	}
	views, commits, err := r.perCommit(found, q)
	if err != nil {
		return nil, err
	}
	if commits > 1 {
		return nil, ambiguous(found)
	}
	if len(views) == 0 {
		return nil, ErrNotFound
	}
	return views, nil
}

// perCommit reads the views of found (a settled one from the archive) and
// keeps one per cluster and commit: the rollout whose own hash the query
// names, or, of the OCI rollouts whose origin revision it names (a commit
// pushed again under a new digest: a CI re-run, a re-tag), the newest,
// which is what the cluster runs of that commit now; the older ones were
// superseded by it. It returns them sorted by cluster, and how many
// commits they are of.
func (r *Reader) perCommit(found map[rollout.Key]*rollout.View, q Query) ([]*rollout.View, int, error) {
	type group struct{ cluster, commit string }
	best := map[group]*rollout.View{}
	commits := map[string]bool{}
	for k, v := range found {
		if v == nil {
			var err error
			if v, err = r.get(k); err != nil {
				return nil, 0, err
			} else if v == nil {
				continue
			}
		}
		g := group{k.Cluster, v.Hash}
		if !matches(v.Hash, q) {
			g.commit = v.OriginHash // matched by its origin revision
		}
		commits[g.commit] = true
		if b := best[g]; b == nil || newerRollout(v, b) {
			best[g] = v
		}
	}
	out := slices.Collect(maps.Values(best))
	slices.SortFunc(out, func(a, b *rollout.View) int { return compareKeys(a.Key(), b.Key()) })
	return out, len(commits), nil
}

// newerRollout orders the rollouts of one commit on one cluster: by first
// evidence, then by hash.
func newerRollout(a, b *rollout.View) bool {
	if !a.FirstSeen.Equal(b.FirstSeen) {
		return a.FirstSeen.After(b.FirstSeen)
	}
	return a.Hash > b.Hash
}

// matching are the rollouts a query names, live (with their view) or
// settled (nil: read with Get). The rollout's own hash wins over an origin
// revision that has it, unless withOrigin.
//
// A full hash live on the cluster asked, or on every cluster the archive
// may hold when none is asked, is answered from memory: no settled
// rollout has its key. Otherwise the archive is asked for the rest (other
// clusters, prefixes, origins); when it cannot be read, the live rollouts
// found are the answer, so that a commit still under way is answered
// while the store restarts, and a query that finds none fails.
func (r *Reader) matching(q Query, withOrigin bool) (map[rollout.Key]*rollout.View, error) {
	r.readArchivedClusters()
	r.snap.mu.RLock()
	own, origin := r.snap.candidates(q)
	alone := !q.Prefix && !withOrigin && len(own) > 0 && r.snap.liveOnEvery(own, q.Cluster)
	r.snap.mu.RUnlock()
	found := map[rollout.Key]*rollout.View{}
	for _, v := range own {
		found[v.Key()] = v
	}
	if alone {
		return found, nil
	}
	live := len(own) > 0 || (withOrigin || q.Prefix) && len(origin) > 0
	unread := func(err error) (map[rollout.Key]*rollout.View, error) {
		if !live {
			return nil, err
		}
		// Not a warning a lookup: the store's failure is told once an
		// episode, where it is written.
		r.log.Debug("settled rollouts cannot be read: answering from the live ones", "hash", q.Hash, "err", err)
		if withOrigin || q.Prefix || len(found) == 0 {
			for _, v := range origin {
				found[v.Key()] = v
			}
		}
		return found, nil
	}
	ownKeys, err := r.archive.SettledKeys(q.Hash, q.Prefix, false, q.Cluster, maxMatches)
	if err != nil {
		return unread(err)
	}
	for _, k := range ownKeys {
		if _, ok := found[k]; !ok {
			found[k] = nil
		}
	}
	if withOrigin || q.Prefix || len(found) == 0 {
		originKeys, err := r.archive.SettledKeys(q.Hash, q.Prefix, true, q.Cluster, maxMatches)
		if err != nil {
			return unread(err)
		}
		for _, v := range origin {
			found[v.Key()] = v
		}
		for _, k := range originKeys {
			if _, ok := found[k]; !ok {
				found[k] = nil
			}
		}
	}
	return found, nil
}

// liveOnEvery reports whether own, the live rollouts of one full hash,
// are on every cluster the archive may hold it on: on the one asked, or,
// when none is, on every cluster known, the archive's read. s.mu held.
func (s *snapshot) liveOnEvery(own []*rollout.View, cluster string) bool {
	if cluster != "" {
		return true // own holds the one key asked
	}
	if !s.archived.Load() || len(own) < len(s.clusters) {
		return false
	}
	for c := range s.clusters {
		if !slices.ContainsFunc(own, func(v *rollout.View) bool { return v.Cluster == c }) {
			return false
		}
	}
	return true
}

// readArchivedClusters adds the clusters of the archive to those known,
// once: on a failure it is tried again at the next lookup, which reads the
// archive meanwhile.
func (r *Reader) readArchivedClusters() {
	if r.snap.archived.Load() {
		return
	}
	clusters, err := r.archive.SettledClusters()
	if err != nil {
		return
	}
	r.snap.mu.Lock()
	for _, c := range clusters {
		r.snap.clusters[c] = struct{}{}
	}
	r.snap.archived.Store(true)
	r.snap.mu.Unlock()
}

func ambiguous(found map[rollout.Key]*rollout.View) error {
	keys := make([]rollout.Key, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return &AmbiguousError{Matches: keys}
}

func compareKeys(a, b rollout.Key) int {
	if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	return strings.Compare(a.Hash, b.Hash)
}

// candidates are the live views a query names: by their own hash, and by
// their origin revision's.
func (s *snapshot) candidates(q Query) (own, origin []*rollout.View) {
	p := indexed(q.Hash)
	if q.Prefix && len(p) < flux.MinPrefix {
		return s.scan(q) // shorter than any query the API takes
	}
	for _, k := range s.byHash[p] {
		if (q.Cluster == "" || k.Cluster == q.Cluster) && matches(k.Hash, q) {
			own = append(own, s.views[k])
		}
	}
	for _, k := range s.byOrigin[p] {
		if v := s.views[k]; (q.Cluster == "" || k.Cluster == q.Cluster) && matches(v.OriginHash, q) {
			origin = append(origin, v)
		}
	}
	return own, origin
}

// scan is candidates read from every live view: for a prefix shorter than
// the index's, and as the index's reference in tests.
func (s *snapshot) scan(q Query) (own, origin []*rollout.View) {
	for k, v := range s.views {
		if q.Cluster != "" && k.Cluster != q.Cluster {
			continue
		}
		if matches(k.Hash, q) {
			own = append(own, v)
		}
		if v.OriginHash != "" && matches(v.OriginHash, q) {
			origin = append(origin, v)
		}
	}
	return own, origin
}

func matches(hash string, q Query) bool {
	if q.Prefix {
		return strings.HasPrefix(hash, q.Hash)
	}
	return hash == q.Hash
}

// Wait long-polls: it returns as soon as the rollout the query names has a
// terminal verdict, or when ctx ends with the latest answer. Only live
// rollouts change, and each change is published to the snapshot, so the
// wait is on the snapshot's channels.
func (r *Reader) Wait(ctx context.Context, q Query) (*rollout.View, error) {
	s := r.snap
	for {
		v, err := r.Lookup(q)
		if ctx.Err() != nil {
			return v, err // also ends the retries below, whatever the state
		}
		var ch chan struct{}
		s.mu.Lock()
		switch {
		case err == nil && v.Terminal:
			s.mu.Unlock()
			return v, nil
		case err == nil:
			k := v.Key()
			if s.views[k] != v {
				s.mu.Unlock()
				continue // changed between the lookup and now
			}
			ch = s.watching(k)
		case errors.Is(err, ErrNotFound):
			if own, origin := s.candidates(q); len(own)+len(origin) > 0 {
				s.mu.Unlock()
				continue // appeared between the lookup and now
			}
			ch = s.created
		default:
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return v, err
		}
	}
}

// Live counts the rollouts in memory, by verdict.
func (r *Reader) Live() map[rollout.Verdict]int {
	r.snap.mu.RLock()
	defer r.snap.mu.RUnlock()
	out := map[rollout.Verdict]int{}
	for _, v := range r.snap.views {
		out[v.Verdict]++
	}
	return out
}

// Cursor is a place in the list of rollouts, which is newest first by
// first evidence, then by key.
type Cursor struct {
	First time.Time
	Key   rollout.Key
}

// String is c as it goes in a URL: Unix nanoseconds, hash, cluster (last:
// it may hold any character).
func (c Cursor) String() string {
	return strconv.FormatInt(c.First.UnixNano(), 10) + ":" + c.Key.Hash + ":" + c.Key.Cluster
}

// ParseCursor reads a cursor String wrote.
func ParseCursor(s string) (Cursor, error) {
	ns, rest, ok := strings.Cut(s, ":")
	hash, cluster, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || !ok2 || err != nil || hash == "" || cluster == "" {
		return Cursor{}, errors.New("malformed cursor")
	}
	return Cursor{First: time.Unix(0, n).UTC(), Key: rollout.Key{Cluster: cluster, Hash: hash}}, nil
}

// CursorOf is v's place in the list.
func CursorOf(v *rollout.View) Cursor { return Cursor{v.FirstSeen, v.Key()} }

// before reports whether v comes at or before c in the list: on a page
// already shown.
func (c Cursor) before(v *rollout.View) bool {
	if !v.FirstSeen.Equal(c.First) {
		return v.FirstSeen.After(c.First)
	}
	return compareKeys(v.Key(), c.Key) <= 0
}

// Page is one page of the list of rollouts. Next, when set, is where the
// next page starts.
type Page struct {
	Views []*rollout.View
	Next  *Cursor
}

// maxScan bounds the settled rollouts one page reads: a filter that few
// match ends a page early, with Next where it stopped.
const maxScan = 5000

// PageQuery says which page of the list to read.
type PageQuery struct {
	Cluster string  // "" for every cluster
	After   *Cursor // where the page starts; nil for the newest
	// Since, when set, ends the list at the rollouts that began before it:
	// the archive is read back to there and no further.
	Since time.Time
	Limit int
	Keep  func(*rollout.View) bool // nil keeps every rollout
}

// Page lists up to q.Limit rollouts after q.After, that q keeps: the live
// ones and the settled ones, merged in the list's order. It reads the
// settled ones from the cursor on, so a page costs the same at any depth.
func (r *Reader) Page(q PageQuery) (Page, error) {
	ok := func(v *rollout.View) bool {
		return (q.Cluster == "" || v.Cluster == q.Cluster) && (q.After == nil || !q.After.before(v)) &&
			!v.FirstSeen.Before(q.Since) && (q.Keep == nil || q.Keep(v))
	}
	r.snap.mu.RLock()
	var live []*rollout.View
	for _, v := range r.snap.views {
		if ok(v) {
			live = append(live, v)
		}
	}
	r.snap.mu.RUnlock()
	inLive := make(map[rollout.Key]bool, len(live))
	for _, v := range live {
		inLive[v.Key()] = true
	}
	var (
		settled []*rollout.View
		stop    *Cursor // where the scan stopped before the end of the list
		scanned int
		until   time.Time
	)
	if q.After != nil {
		until = q.After.First
	}
	err := r.archive.ScanSettled(q.Cluster, until, func(v *rollout.View) bool {
		if v.FirstSeen.Before(q.Since) {
			return false // the end of the list asked for: all the rest are older
		}
		if len(settled) > q.Limit && !v.FirstSeen.Equal(settled[len(settled)-1].FirstSeen) {
			return false // enough, and past the ties of the last one
		}
		if scanned++; scanned > maxScan {
			c := CursorOf(v)
			stop = &c
			return false
		}
		if ok(v) && !inLive[v.Key()] {
			settled = append(settled, v)
		}
		return true
	})
	if err != nil {
		return Page{}, err
	}
	all := append(live, settled...)
	slices.SortFunc(all, compareListed)
	if stop != nil {
		// Live rollouts older than where the scan stopped belong to a
		// later page, after the settled ones not read yet.
		all = slices.DeleteFunc(all, func(v *rollout.View) bool { return !stop.before(v) })
	}
	var p Page
	switch {
	case len(all) > q.Limit:
		p.Views = all[:q.Limit]
		c := CursorOf(all[q.Limit-1])
		p.Next = &c
	case stop != nil:
		p.Views = all
		if len(all) > 0 {
			c := CursorOf(all[len(all)-1])
			p.Next = &c
		} else {
			// Nothing matched in this stretch: go on just before where it stopped.
			c := *stop
			c.First = c.First.Add(time.Nanosecond)
			p.Next = &c
		}
	default:
		p.Views = all
	}
	return p, nil
}

// compareListed orders the list: newest first, then by key.
func compareListed(a, b *rollout.View) int {
	if c := b.FirstSeen.Compare(a.FirstSeen); c != 0 {
		return c
	}
	return compareKeys(a.Key(), b.Key())
}

// Changed waits until the live view of k is no longer seen (the one the
// caller has), or ctx ends, and returns the view then: nil once k is not
// live (settled, collected, or never seen). A status page long-polls with
// it, to show every change of a live rollout as it happens.
func (r *Reader) Changed(ctx context.Context, k rollout.Key, seen *rollout.View) *rollout.View {
	s := r.snap
	for {
		s.mu.Lock()
		v := s.views[k]
		if v == nil || v != seen {
			s.mu.Unlock()
			if v == nil {
				return r.Get(k)
			}
			return v
		}
		ch := s.watching(k)
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return seen
		}
	}
}

// Supersedes lists the rollouts v superseded, newest first. Only a rollout
// that was still inside its deadline when v began can have been superseded
// by it (after the deadline it is stuck, not superseded), so the archive is
// read back from v's start for one deadline's length, no further.
func (r *Reader) Supersedes(v *rollout.View) ([]*rollout.View, error) {
	k, from := v.Key(), v.FirstSeen.Add(-v.Deadline.Sub(v.FirstSeen))
	by := func(o *rollout.View) bool { return o.SupersedeKey != nil && *o.SupersedeKey == k }
	var out []*rollout.View
	r.snap.mu.RLock()
	for _, o := range r.snap.views {
		if o.Cluster == k.Cluster && by(o) {
			out = append(out, o)
		}
	}
	r.snap.mu.RUnlock()
	live := make(map[rollout.Key]bool, len(out))
	for _, o := range out {
		live[o.Key()] = true
	}
	err := r.archive.ScanSettled(k.Cluster, v.FirstSeen, func(o *rollout.View) bool {
		if o.FirstSeen.Before(from) {
			return false
		}
		if by(o) && !live[o.Key()] {
			out = append(out, o)
		}
		return true
	})
	slices.SortFunc(out, compareListed)
	return out, err
}
