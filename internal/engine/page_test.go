package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestPageBoundsItsScan: a filter that matches only the oldest of many
// settled rollouts ends a page early, with where to go on, instead of
// reading the whole archive for one page; following the pages finds it.
func TestPageBoundsItsScan(t *testing.T) {
	e := enginetest.Start(t, t.TempDir(), defaultConfig(), fixedClock(t0), true)
	const n = 6000
	var views []*rollout.View
	for i := range n {
		first := t0.Add(-time.Duration(i+1) * time.Minute)
		views = append(views, &rollout.View{Cluster: "prod", Hash: fmt.Sprintf("%040x", i), Verdict: rollout.VerdictApplied,
			Terminal: true, FirstSeen: first, LastSeen: first})
	}
	if err := e.DB.Commit(&rollout.Batch{Settle: views, At: t0}); err != nil {
		t.Fatal(err)
	}
	oldest := views[n-1].Hash
	keep := func(v *rollout.View) bool { return v.Hash == oldest }
	var after *engine.Cursor
	var found []string
	pages := 0
	for {
		p, err := e.Page(engine.PageQuery{After: after, Limit: 50, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, v := range p.Views {
			found = append(found, v.Hash)
		}
		if p.Next == nil {
			break
		}
		if pages > 3 {
			t.Fatal("the pages do not end")
		}
		after = p.Next
	}
	if pages != 2 || len(found) != 1 || found[0] != oldest {
		t.Fatalf("found %v over %d pages, want the oldest over 2 (the first stops after 5,000)", found, pages)
	}
	// Unfiltered, the list goes through every one once.
	seen := map[string]bool{}
	after = nil
	for {
		p, err := e.Page(engine.PageQuery{Cluster: "prod", After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range p.Views {
			if seen[v.Hash] {
				t.Fatalf("%s twice", v.Hash)
			}
			seen[v.Hash] = true
		}
		if p.Next == nil {
			break
		}
		after = p.Next
	}
	if len(seen) != n {
		t.Fatalf("%d rollouts listed, want %d", len(seen), n)
	}
	// Since ends the list: the ten newest, in one page that is the whole
	// list, not a scan of 5,000 that leaves a cursor to go on.
	p, err := e.Page(engine.PageQuery{Since: t0.Add(-10*time.Minute - time.Second), Limit: 1000})
	if err != nil || len(p.Views) != 10 || p.Next != nil || p.Views[9].Hash != views[9].Hash {
		t.Fatalf("since: %d views, next %v (%v)", len(p.Views), p.Next, err)
	}
}

// TestSupersedes: what a rollout superseded, live or settled, read back
// from its start for one deadline's length only.
func TestSupersedes(t *testing.T) {
	e := enginetest.Start(t, t.TempDir(), defaultConfig(), fixedClock(t0), true)
	by := rollout.Key{Cluster: "prod", Hash: fmt.Sprintf("%040x", 999)}
	v := &rollout.View{Cluster: "prod", Hash: by.Hash, FirstSeen: t0, Deadline: t0.Add(30 * time.Minute)}
	settled := func(i int, first time.Time, superseder *rollout.Key) *rollout.View {
		return &rollout.View{Cluster: "prod", Hash: fmt.Sprintf("%040x", i), Verdict: rollout.VerdictSuperseded, Terminal: true,
			FirstSeen: first, LastSeen: first, SupersedeKey: superseder}
	}
	other := rollout.Key{Cluster: "prod", Hash: fmt.Sprintf("%040x", 998)}
	b := &rollout.Batch{Settle: []*rollout.View{
		settled(1, t0.Add(-time.Minute), &by),      // superseded by v
		settled(2, t0.Add(-2*time.Minute), &other), // by another
		settled(3, t0.Add(-29*time.Minute), &by),   // by v, just inside the window
		settled(4, t0.Add(-31*time.Minute), &by),   // outside: cannot have been
	}, At: t0}
	if err := e.DB.Commit(b); err != nil {
		t.Fatal(err)
	}
	got, err := e.Supersedes(v)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, o := range got {
		hashes = append(hashes, o.Hash[36:])
	}
	if fmt.Sprint(hashes) != "[0001 0003]" {
		t.Fatalf("supersedes %v, want [0001 0003]", hashes)
	}
}
