package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// TestHistories: each cluster's rollouts newest first, live and settled,
// the settled ones cut at HistoryDepth; what settles after a read is in
// the next without the archive read again whole; a restarted engine
// reads the same.
func TestHistories(t *testing.T) {
	layers := []string{"infra", "apps"}
	commits := engine.HistoryDepth + 10
	obs := make([][]rollout.Observation, commits) // by commit
	for i := range commits {
		for j, l := range layers {
			o := prog(l, fmt.Sprintf("H%d", i), i*3600+j)
			s := succ(l, fmt.Sprintf("H%d", i), i*3600+j+5)
			obs[i] = append(obs[i], o, s)
			if i < 3 {
				for _, x := range []*rollout.Observation{&o, &s} {
					x.Cluster = "staging"
				}
				obs[i] = append(obs[i], o, s)
			}
		}
	}
	cfg := settleConfig(time.Minute)
	dir := t.TempDir()
	end := t0.Add(time.Duration(commits+1) * time.Hour)
	h := start(t, dir, cfg, fixedClock(end))
	half := 30
	for _, o := range obs[:half] {
		h.submit(o...)
	}
	settle(t, h.engine)
	check := func(e *engine.Engine, newest int) {
		t.Helper()
		hs, err := e.Histories()
		if err != nil {
			t.Fatal(err)
		}
		d := hs["default"]
		want := min(newest+1, engine.HistoryDepth+2) // the live ones (at most 2) and the depth
		if len(d.Rollouts) < want-2 || len(d.Rollouts) > want {
			t.Fatalf("default: %d rollouts, want %d or up to 2 fewer", len(d.Rollouts), want)
		}
		for i, v := range d.Rollouts {
			if v.Hash != hashOf(fmt.Sprintf("H%d", newest-i)) || v.Verdict != rollout.VerdictApplied {
				t.Fatalf("default's rollout %d: %s %s, want H%d applied", i, v.Hash[:7], v.Verdict, newest-i)
			}
			if v.Layers.Len() != 0 && i >= 2 {
				t.Fatalf("a settled rollout kept its layers")
			}
		}
		if d.Cut != (newest+1 > len(d.Rollouts)) {
			t.Fatalf("default: cut %t with %d of %d", d.Cut, len(d.Rollouts), newest+1)
		}
		if s := hs["staging"]; len(s.Rollouts) != 3 || s.Cut || s.Rollouts[0].Hash != hashOf("H2") {
			t.Fatalf("staging: %d rollouts, cut %t", len(s.Rollouts), s.Cut)
		}
	}
	check(h.engine, half-1)
	for _, o := range obs[half:] {
		h.submit(o...)
	}
	settle(t, h.engine)
	check(h.engine, commits-1)
	h.stop()
	h = start(t, dir, cfg, fixedClock(end))
	check(h.engine, commits-1)
}

// BenchmarkHistories is the read GET /environments makes of a hub's 500
// clusters, each with 2 live rollouts and 50 settled ones (on bbolt), once
// the settled ones were loaded.
func BenchmarkHistories(b *testing.B) {
	db, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const clusters = 500
	r := engine.NewReader(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var live []*rollout.View
	for c := range clusters {
		var settled []*rollout.View
		for i := range engine.HistoryDepth + 2 {
			hash := fmt.Sprintf("%040x", i)
			at := t0.Add(time.Duration(i) * time.Hour)
			v := &rollout.View{Cluster: fmt.Sprintf("c%03d", c), Hash: hash, Revision: "main@sha1:" + hash, Verdict: rollout.VerdictApplied,
				Terminal: true, FirstSeen: at, LastSeen: at, CompletedAt: &at}
			if i < engine.HistoryDepth {
				settled = append(settled, v)
			} else {
				live = append(live, v)
			}
		}
		if err := db.Commit(&rollout.Batch{Settle: settled, At: t0}); err != nil {
			b.Fatal(err)
		}
	}
	r.Publish(live, nil, false)
	if hs, err := r.Histories(); err != nil || len(hs) != clusters || len(hs["c000"].Rollouts) != engine.HistoryDepth+2 {
		b.Fatalf("%d clusters, %v", len(hs), err)
	}
	// Unchanged since the last read; one cluster's live view changed (an
	// event came).
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Histories(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v := *live[0]
			r.Publish([]*rollout.View{&v}, nil, false)
			if _, err := r.Histories(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestHistoriesKeptEqualsRead: the histories a reader keeps across
// publishes and settles, read after every step of a random history on
// three clusters, equal those a new reader reads afresh from the same
// archive and live views.
func TestHistoriesKeptEqualsRead(t *testing.T) {
	rnd := rand.New(rand.NewPCG(54, 1))
	te := enginetest.Start(t, t.TempDir(), settleConfig(time.Minute), fixedClock(t0.Add(1000*time.Hour)), true)
	show := func(hs map[string]environments.History) string {
		var b strings.Builder
		for _, c := range slices.Sorted(maps.Keys(hs)) {
			fmt.Fprintf(&b, "%s cut=%t:", c, hs[c].Cut)
			for _, v := range hs[c].Rollouts {
				fmt.Fprintf(&b, " %s/%s", v.Hash[:6], v.Verdict)
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	clusters := []string{"a", "b", "c"}
	n := map[string]int{}
	for step := range 220 {
		c := clusters[rnd.IntN(len(clusters))]
		label := fmt.Sprintf("%s%d", c, n[c])
		n[c]++
		var obs []rollout.Observation
		for j, l := range []string{"infra", "apps"} {
			sig := succ(l, label, step*60+j)
			if rnd.IntN(5) == 0 && l == "apps" {
				sig.Signal, sig.Reason = rollout.SignalFailed, "HealthCheckFailed"
			}
			sig.Cluster = c
			obs = append(obs, sig)
		}
		if err := te.SubmitAll(context.Background(), obs); err != nil {
			t.Fatal(err)
		}
		if rnd.IntN(3) == 0 {
			if err := te.Settle(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if rnd.IntN(2) == 0 {
			continue // not read at every step: changes pile up between reads
		}
		kept, err := te.Histories()
		if err != nil {
			t.Fatal(err)
		}
		fresh := engine.NewReader(te.DB, slog.New(slog.DiscardHandler))
		fresh.Publish(te.Views(), nil, true)
		read, err := fresh.Histories()
		if err != nil {
			t.Fatal(err)
		}
		if show(kept) != show(read) {
			t.Fatalf("step %d: kept\n%s\nread afresh\n%s", step, show(kept), show(read))
		}
	}
	if hs, _ := te.Histories(); !hs["a"].Cut && !hs["b"].Cut && !hs["c"].Cut {
		t.Fatalf("no history was cut at %d: the depth was never reached\n%s", engine.HistoryDepth, show(hs))
	}
}

// TestHistoriesInTheModelsOrder: rollouts of one cluster first seen in
// the same second (Flux stamps events to the second; a layer's status can
// carry an older condition's time) are in the model's order, the greater
// hash the newer, live or settled: the list's order, which breaks the tie
// the other way, would say the older runs.
func TestHistoriesInTheModelsOrder(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	view := func(hash string, v rollout.Verdict) *rollout.View {
		return &rollout.View{Cluster: "one", Hash: strings.Repeat(hash, 20), Verdict: v, FirstSeen: t0, LastSeen: t0}
	}
	if err := db.Commit(&rollout.Batch{Settle: []*rollout.View{view("9f", rollout.VerdictFailed), view("db", rollout.VerdictApplied)}, At: t0}); err != nil {
		t.Fatal(err)
	}
	r := engine.NewReader(db, slog.New(slog.DiscardHandler))
	r.Publish([]*rollout.View{view("3a", rollout.VerdictFailed), view("e5", rollout.VerdictApplying)}, nil, false)
	hs, err := r.Histories()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range hs["one"].Rollouts {
		got = append(got, v.Hash[:2])
	}
	if strings.Join(got, " ") != "e5 db 9f 3a" {
		t.Fatalf("order %v, want the greater hash first within a second", got)
	}
}
