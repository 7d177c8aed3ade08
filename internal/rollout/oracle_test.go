package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The oracle: random histories of a simulated Flux (fluxsim_test.go),
// given to the model as notification-controller delivers them (late, out
// of order, twice, some lost, with restarts of the service in between),
// and the model's every verdict held to what really happened:
//
//  1. never applied before every layer it could know of ran the commit: a
//     layer the service heard report the commit, or an older commit of its
//     source (one linked to it by what the service heard: events alone
//     cannot tell otherwise which source a layer reads);
//  2. never failed without a failure of the commit (but a release's, when
//     the report of the apply it follows was lost);
//  3. once applied, never applying, superseded or stuck again;
//  4. once every event arrived (the histories that lose none), the verdict
//     of every commit the service heard of is the truth's.
//
// A counterexample found here becomes a line in testdata/rules.

var oracleT0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

func TestOracle(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 1000 // make test: under the race detector, about 25 s on 2 cores
	}
	for seed := range n {
		if err := runOracle(uint64(seed)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// FuzzOracle searches for a history that breaks the oracle's properties;
// the seed is the whole history.
func FuzzOracle(f *testing.F) {
	for seed := range 8 {
		f.Add(uint64(seed))
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		if err := runOracle(seed); err != nil {
			t.Fatal(err)
		}
	})
}

type oracle struct {
	sim     *fluxSim
	byHash  map[string]*simCommit
	index   map[string]int // commit label -> push order
	verdict map[string]Verdict
	known   map[string]map[string]bool // by commit: the layers the service knew of when it first said applied
	// what the service heard: by layer, the commits it reported; by
	// emitter, to link the commits it reported (what events can know of
	// which commits are of one source)
	heard map[string]map[string]bool
	links map[string]string // union-find over commit labels
	by    map[string]string // emitter -> a commit it reported
	log   []string
}

func runOracle(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 50))
	cfg := randomSimConfig(r)
	sim := newFluxSim(cfg, r, oracleT0)
	sim.run()
	o := &oracle{sim: sim, byHash: map[string]*simCommit{}, index: map[string]int{}, verdict: map[string]Verdict{}, known: map[string]map[string]bool{},
		heard: map[string]map[string]bool{}, links: map[string]string{}, by: map[string]string{}}
	for i, c := range sim.commits {
		o.byHash[c.hash], o.index[c.label] = c, i
	}
	if err := o.replay(r); err != nil {
		return fmt.Errorf("%+v: %w\n%s", cfg, err, strings.Join(o.log, "\n"))
	}
	return nil
}

func (o *oracle) replay(r *rand.Rand) error {
	mcfg := Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, Verify: true}
	m, err := NewModel(mcfg)
	if err != nil {
		return err
	}
	st := newMemStore()
	arr := o.sim.arrivals()
	var now time.Time
	for len(arr) > 0 {
		n := min(len(arr), 1+r.IntN(6))
		for n < len(arr) && arr[n].group != 0 && arr[n].group == arr[n-1].group {
			n++ // the reader's marks of a commit are one batch
		}
		batch := make([]Observation, 0, n)
		for _, e := range arr[:n] {
			ob := e.obs
			ob.Holds = slices.Clone(ob.Holds)
			if err := m.Normalise(&ob); err != nil {
				return err
			}
			batch = append(batch, ob)
			now = e.arrives
			o.hear(ob)
		}
		arr = arr[n:]
		c := &Change{}
		m.Apply(c, [][]Observation{batch}, nil, now)
		m.Verify()
		st.store(c)
		if err := o.check(c.Views, now); err != nil {
			return err
		}
		if r.IntN(25) == 0 {
			// The service restarts: it knows what it stored.
			if m, err = NewModel(mcfg); err != nil {
				return err
			}
			c, err := m.Load(st, now)
			if err != nil {
				return err
			}
			m.Verify()
			if err := o.check(c.Views, now); err != nil {
				return fmt.Errorf("after a restart: %w", err)
			}
		}
	}
	// Every event is in: the clock runs on past every deadline, and what
	// can settle settles.
	now = now.Add(2 * time.Hour)
	c := &Change{}
	m.Expire(c, now)
	st.store(c)
	if err := o.check(c.Views, now); err != nil {
		return err
	}
	for more := true; more; {
		c := &Change{}
		_, more = m.Settle(c, now, func() bool { return false })
		st.store(c)
		if err := o.check(append(c.Views, c.Settle...), now); err != nil {
			return fmt.Errorf("settling: %w", err)
		}
	}
	if !o.sim.cfg.lossless() {
		return nil
	}
	for _, c := range o.sim.commits {
		want, ok := o.truth(c)
		got, seen := o.verdict[c.hash]
		switch {
		case !seen && !ok:
		case !seen:
			return fmt.Errorf("%s: the service never heard of it, the truth is %s", c.label, want)
		case !ok:
			return fmt.Errorf("%s: %s, but no layer ever reported it", c.label, got)
		case got != want:
			return fmt.Errorf("%s: %s, the truth is %s", c.label, got, want)
		}
	}
	return nil
}

// hear records what the service was told.
func (o *oracle) hear(ob Observation) {
	c := o.byHash[ob.Hash]
	if c == nil {
		return // a release's report: no revision
	}
	o.log = append(o.log, fmt.Sprintf("%s %s %s %s", ob.At.Sub(oracleT0), ob.Emitter.Name, c.label, ob.Reason))
	if ob.Emitter.IsLayer() {
		h := o.heard[ob.Emitter.Name]
		if h == nil {
			h = map[string]bool{}
			o.heard[ob.Emitter.Name] = h
		}
		h[c.label] = true
	}
	e := ob.Emitter.String()
	if p, ok := o.by[e]; ok {
		o.union(p, c.label)
	} else {
		o.by[e] = c.label
		o.find(c.label)
	}
}

func (o *oracle) find(x string) string {
	p, ok := o.links[x]
	if !ok {
		o.links[x] = x
		return x
	}
	if p == x {
		return x
	}
	root := o.find(p)
	o.links[x] = root
	return root
}

func (o *oracle) union(a, b string) { o.links[o.find(a)] = o.find(b) }

// check holds every view the model published to the truth as far as the
// events received so far can know it.
func (o *oracle) check(views []*View, now time.Time) error {
	for _, v := range views {
		c := o.byHash[v.Hash]
		if c == nil {
			return fmt.Errorf("a rollout of a revision nobody pushed: %s", v.Revision)
		}
		from, seen := o.verdict[v.Hash]
		o.verdict[v.Hash] = v.Verdict
		o.log = append(o.log, fmt.Sprintf("  => %s %s (%s) behind %v", c.label, v.Verdict, v.Summary, v.Behind))
		if seen && from == VerdictApplied && v.Verdict != VerdictApplied && v.Verdict != VerdictFailed {
			// Only a layer that had never spoken may hold it back again:
			// events alone could not know it (the first commit a new
			// instance hears of); or one whose success arrived before its
			// report of the apply that named a release, which then holds
			// it back until the release reports (docs/verdicts.md, "What
			// events cannot tell").
			for _, b := range v.Behind {
				if o.known[c.label][strings.TrimPrefix(b, "flux-system/")] && !holdsRelease(v, b) {
					return fmt.Errorf("%s went back from applied to %s (%s)", c.label, v.Verdict, v.Summary)
				}
			}
		}
		switch v.Verdict {
		case VerdictApplied:
			first := o.known[c.label] == nil
			if first {
				o.known[c.label] = map[string]bool{}
			}
			for i, l := range o.sim.layers {
				if v.ExpectedFrom == ExpectedFromCluster {
					// The cluster says which layers: every one on the
					// source but one suspended before it ran the commit.
					if l.src != c.src || o.sim.excluded(i, c) {
						continue
					}
				} else if l.src != c.src || !o.knows(l.name, c) {
					continue
				}
				if first {
					o.known[c.label][l.name] = true
				}
				if _, ran := o.sim.truth.ran[c.label][l.name]; !ran {
					return fmt.Errorf("%s applied (%s) at %s, but %s, which the service heard of, never ran it", c.label, v.Summary, now.Sub(oracleT0), l.name)
				}
			}
		case VerdictFailed:
			if f := v.DecidingFailure(); f != nil && f.Release != (Ref{}) && !o.sim.cfg.lossless() {
				// A release's report goes to the last apply of its layer
				// the service heard name it: when the report of a later
				// apply that changed it was lost, to an older commit
				// (docs/verdicts.md, "What events cannot tell").
				break
			}
			if len(o.sim.truth.failed[c.label]) == 0 {
				return fmt.Errorf("%s failed (%s) without a failure", c.label, v.Summary)
			}
		}
	}
	return nil
}

// knows reports whether the service, from what it heard, could know that
// layer must run c: it heard the layer report c, or an older commit of c's
// source that what it heard links to c. A history without a baseline
// (fresh) has layers it never heard before c: only their reports of c
// count there.
func (o *oracle) knows(layer string, c *simCommit) bool {
	h := o.heard[layer]
	if h[c.label] {
		return true
	}
	if o.sim.cfg.fresh {
		return false
	}
	for label := range h {
		if o.index[label] < o.index[c.label] && o.byLabel(label).src == c.src && o.find(label) == o.find(c.label) {
			return true
		}
	}
	return false
}

func holdsRelease(v *View, layer string) bool {
	for _, l := range v.Layers.All() {
		if l.Name == layer {
			return len(l.Releases) > 0
		}
	}
	return false
}

func (o *oracle) byLabel(label string) *simCommit { return o.sim.commits[o.index[label]] }

// truth is the verdict of what really happened to c, when Flux sent
// anything about it (docs/verdicts.md, "Precedence and time", read on the
// simulation's facts: which layers ran it and when, each failure).
func (o *oracle) truth(c *simCommit) (Verdict, bool) {
	sent := o.sim.truth.sent[c.label]
	var first time.Time
	for _, ob := range sent {
		if first.IsZero() || ob.At.Before(first) {
			first = ob.At
		}
	}
	if o.sim.cfg.cluster {
		// The reader marks every commit its source's artifact was.
		if at := o.sim.t0.Add(time.Duration(c.pushed) * time.Second); first.IsZero() || at.Before(first) {
			first = at
		}
	} else if layered := slices.ContainsFunc(sent, func(ob Observation) bool { return !ob.Emitter.IsSource() }); !layered && !o.sim.cfg.sourceEvts {
		return 0, false
	}
	deadline := first.Add(30 * time.Minute)
	completed, completedAt := true, time.Time{}
	for i, l := range o.sim.layers {
		if l.src != c.src || !o.spoke(l.name) && !o.sim.cfg.cluster || o.sim.excluded(i, c) {
			continue
		}
		at, ran := o.sim.truth.ran[c.label][l.name]
		if !ran {
			completed = false
			break
		}
		if at.After(completedAt) {
			completedAt = at
		}
	}
	var failure time.Time
	for layer, at := range o.sim.truth.failed[c.label] {
		if i := slices.IndexFunc(o.sim.layers, func(l *simLayer) bool { return l.name == layer }); o.sim.excluded(i, c) {
			continue // a failure on a layer that is not expected (suspended since) fails nothing
		}
		if failure.IsZero() || at.Before(failure) {
			failure = at
		}
	}
	failedBy := func(t time.Time) bool { return !failure.IsZero() && !failure.After(t) }
	switch {
	case completed && failedBy(completedAt):
		return VerdictFailed, true
	case completed:
		return VerdictApplied, true
	case failedBy(deadline):
		return VerdictFailed, true
	}
	// Superseded: a newer commit of the source reached a layer by the
	// deadline (this one never completes).
	for _, n := range o.sim.commits {
		if n.src != c.src || o.index[n.label] <= o.index[c.label] {
			continue
		}
		for _, ob := range o.sim.truth.sent[n.label] {
			if ob.Emitter.IsLayer() && !ob.At.After(deadline) {
				return VerdictSuperseded, true
			}
		}
	}
	return VerdictStuck, true
}

// spoke reports whether a layer sent anything at all: one that never did
// cannot be known from events.
func (o *oracle) spoke(layer string) bool {
	for _, sent := range o.sim.truth.sent {
		for _, ob := range sent {
			if ob.Emitter.IsLayer() && ob.Emitter.Name == layer {
				return true
			}
		}
	}
	return false
}
