package engine

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestCandidatesIndex: through views published, republished with another
// origin revision, removed and replaced wholesale, the index finds what a
// scan of every live view finds, for exact hashes and prefixes, on one
// cluster or all.
func TestCandidatesIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Few distinct first digits, so that keys share index entries.
	hashes := []string{"aaaaaaa1", "aaaaaaa2", "aaaaaab1", "bbbbbbb1", "bbbbbbb2", "ccc"}
	clusters := []string{"", "prod", "staging"}
	view := func() *rollout.View {
		v := &rollout.View{Cluster: clusters[r.IntN(len(clusters))], Hash: hashes[r.IntN(len(hashes))]}
		if r.IntN(2) == 0 {
			v.OriginHash = hashes[r.IntN(len(hashes))]
		}
		return v
	}
	s := newSnapshot()
	checked := 0
	for step := range 3000 {
		var views []*rollout.View
		for range r.IntN(4) {
			views = append(views, view())
		}
		var removed []rollout.Key
		for range r.IntN(3) {
			removed = append(removed, view().Key())
		}
		s.publish(views, removed, r.IntN(50) == 0)

		for _, h := range hashes {
			for _, n := range []int{len(h), min(len(h), flux.MinPrefix), 3} {
				for _, c := range clusters {
					q := Query{Cluster: c, Hash: h[:n], Prefix: n < len(h)}
					own, origin := s.candidates(q)
					wantOwn, wantOrigin := s.scan(q)
					if !sameViews(own, wantOwn) || !sameViews(origin, wantOrigin) {
						t.Fatalf("step %d, %+v: index %v %v, scan %v %v", step, q, own, origin, wantOwn, wantOrigin)
					}
					checked += len(own) + len(origin)
				}
			}
		}
	}
	// Nothing stale stays behind: each live view once in byHash, and once
	// in byOrigin when it has an origin revision.
	entries, origins := 0, 0
	for p, ks := range s.byHash {
		for _, k := range ks {
			if s.views[k] == nil || indexed(k.Hash) != p {
				t.Fatalf("byHash[%s] holds %v, not a live view's", p, k)
			}
			entries++
		}
	}
	for p, ks := range s.byOrigin {
		for _, k := range ks {
			if v := s.views[k]; v == nil || v.OriginHash == "" || indexed(v.OriginHash) != p {
				t.Fatalf("byOrigin[%s] holds %v, not a live view's origin", p, k)
			}
			origins++
		}
	}
	want := 0
	for _, v := range s.views {
		if v.OriginHash != "" {
			want++
		}
	}
	if entries != len(s.views) || origins != want {
		t.Fatalf("%d and %d entries for %d views, %d with an origin", entries, origins, len(s.views), want)
	}
	if checked == 0 {
		t.Fatal("no query found anything")
	}
}

func sameViews(a, b []*rollout.View) bool {
	key := func(v *rollout.View) string { return v.Cluster + "/" + v.Hash }
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i, v := range a {
		ka[i] = key(v)
	}
	for i, v := range b {
		kb[i] = key(v)
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}
