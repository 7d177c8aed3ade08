package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrNotFound: no rollout matches the query.
var ErrNotFound = errors.New("revision not seen")

// AmbiguousError: the query matches more than one rollout.
type AmbiguousError struct{ Matches []Key }

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
	mu      sync.RWMutex
	views   map[Key]*View
	watch   map[Key]chan struct{}
	created chan struct{} // closed when a rollout appears
	ready   atomic.Bool
}

func newSnapshot() *snapshot {
	return &snapshot{views: map[Key]*View{}, watch: map[Key]chan struct{}{}, created: make(chan struct{})}
}

func (s *snapshot) setReady(b bool) { s.ready.Store(b) }

func (s *snapshot) publish(views []*View, removed []Key, replace bool) {
	if len(views) == 0 && len(removed) == 0 && !replace {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if replace {
		clear(s.views)
	}
	appeared := false
	for _, v := range views {
		k := Key{v.Cluster, v.Hash}
		if _, ok := s.views[k]; !ok {
			appeared = true
		}
		s.views[k] = v
		if ch, ok := s.watch[k]; ok {
			close(ch)
			delete(s.watch, k)
		}
	}
	for _, k := range removed {
		delete(s.views, k)
	}
	if appeared {
		close(s.created)
		s.created = make(chan struct{})
	}
}

// Ready reports whether the engine is running on loaded state.
func (e *Engine) Ready() bool { return e.snap.ready.Load() }

// Get returns the view of one rollout, or nil.
func (e *Engine) Get(k Key) *View {
	e.snap.mu.RLock()
	defer e.snap.mu.RUnlock()
	return e.snap.views[k]
}

// Lookup finds the one rollout a query names.
func (e *Engine) Lookup(q Query) (*View, error) {
	e.snap.mu.RLock()
	defer e.snap.mu.RUnlock()
	return e.snap.lookup(q)
}

func (s *snapshot) lookup(q Query) (*View, error) {
	if !q.Prefix {
		// The rollout's own hash wins over an origin revision that has it.
		var own []*View
		if q.Cluster != "" {
			if v := s.views[Key{q.Cluster, q.Hash}]; v != nil {
				return v, nil
			}
		} else {
			for k, v := range s.views {
				if k.Hash == q.Hash {
					own = append(own, v)
				}
			}
		}
		if len(own) > 0 {
			return one(own)
		}
	}
	var found []*View
	for k, v := range s.views {
		if q.Cluster != "" && k.Cluster != q.Cluster {
			continue
		}
		if matches(k.Hash, q) || v.OriginHash != "" && matches(v.OriginHash, q) {
			found = append(found, v)
		}
	}
	return one(found)
}

func matches(hash string, q Query) bool {
	if q.Prefix {
		return strings.HasPrefix(hash, q.Hash)
	}
	return hash == q.Hash
}

func one(vs []*View) (*View, error) {
	switch len(vs) {
	case 0:
		return nil, ErrNotFound
	case 1:
		return vs[0], nil
	}
	keys := make([]Key, len(vs))
	for i, v := range vs {
		keys[i] = Key{v.Cluster, v.Hash}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Hash, b.Hash)
	})
	return nil, &AmbiguousError{Matches: keys}
}

// Wait long-polls: it returns as soon as the rollout the query names has a
// terminal verdict, or when ctx ends with the latest answer.
func (e *Engine) Wait(ctx context.Context, q Query) (*View, error) {
	s := e.snap
	for {
		s.mu.Lock()
		v, err := s.lookup(q)
		var ch chan struct{}
		switch {
		case err == nil && v.Terminal:
			s.mu.Unlock()
			return v, nil
		case err == nil:
			k := Key{v.Cluster, v.Hash}
			if ch = s.watch[k]; ch == nil {
				ch = make(chan struct{})
				s.watch[k] = ch
			}
		case errors.Is(err, ErrNotFound):
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

// List returns up to limit rollouts, newest first, of one cluster or all.
func (e *Engine) List(cluster string, limit int) []*View {
	e.snap.mu.RLock()
	out := make([]*View, 0, min(limit, len(e.snap.views)))
	for k, v := range e.snap.views {
		if cluster == "" || k.Cluster == cluster {
			out = append(out, v)
		}
	}
	e.snap.mu.RUnlock()
	slices.SortFunc(out, func(a, b *View) int {
		if c := b.FirstSeen.Compare(a.FirstSeen); c != 0 {
			return c
		}
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Hash, b.Hash)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
