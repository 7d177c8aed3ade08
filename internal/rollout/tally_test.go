package rollout

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// wideHistory makes revisions rolling across width layers (more than two
// chunks of Layers, a tree a few levels deep): on some revisions the
// cluster says which layers must move and what each depends on (a chain,
// or one base layer), and layers wait, progress, apply, fail, fail and
// recover, are canceled or stay silent. Revisions overlap, so layers move
// on to the next one while others still apply the last.
func wideHistory(r *rand.Rand, width, revisions int) []Observation {
	var obs []Observation
	name := func(l int) string { return fmt.Sprintf("l%03d", l) }
	for rev := range revisions {
		hash := fmt.Sprintf("w%d", rev)
		start := rev * 40
		if r.IntN(2) == 0 {
			for l := range width {
				o := stepObs(name(l), hash, start, SignalExpected)
				switch {
				case l == 0:
				case r.IntN(3) == 0:
					o.DependsOn = []string{"flux-system/" + name(0)}
				default:
					o.DependsOn = []string{"flux-system/" + name(l-1)}
				}
				if r.IntN(20) == 0 {
					o.Signal = SignalSuspended
				}
				obs = append(obs, o)
			}
		}
		for l := range width {
			if r.IntN(10) == 0 {
				continue // silent
			}
			// Layers begin at different times, so the earliest move to a
			// revision is held by few of them.
			begin := start + r.IntN(8)
			at := begin + l/8 + r.IntN(30)
			obs = append(obs, stepObs(name(l), hash, begin, SignalWaiting), stepObs(name(l), hash, at, SignalProgressing))
			switch r.IntN(8) {
			case 0:
				obs = append(obs, stepObs(name(l), hash, at+1, SignalFailed))
			case 1:
				obs = append(obs, stepObs(name(l), hash, at+1, SignalFailed), stepObs(name(l), hash, at+20, SignalSucceeded))
			case 2:
				obs = append(obs, stepObs(name(l), hash, at+1, SignalCanceled))
			case 3:
			default:
				obs = append(obs, stepObs(name(l), hash, at+1, SignalSucceeded), stepObs(name(l), hash, at+200, SignalSucceeded))
			}
		}
	}
	return obs
}

// TestTallyAgreesWithReference: views made from the tally, patched event
// by event, equal the reference's fold of every slot (Verify panics on a
// difference) over wide histories applied in shuffled batches, so layers
// learn late of revisions between two they reported (the earliest move
// to a revision goes stale), turn stuck at the deadline, and settle.
func TestTallyAgreesWithReference(t *testing.T) {
	for seed := range 6 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 10))
			obs := wideHistory(r, 130, 5)
			if seed%3 != 0 {
				r.Shuffle(len(obs), func(i, j int) { obs[i], obs[j] = obs[j], obs[i] })
			}
			m, err := NewModel(Config{StuckAfter: 3 * time.Minute, SettleAfter: time.Minute, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			now := mt0
			for len(obs) > 0 {
				n := min(len(obs), 1+r.IntN(40))
				batch := obs[:n]
				obs = obs[n:]
				for i := range batch {
					if err := m.Normalise(&batch[i]); err != nil {
						t.Fatal(err)
					}
				}
				now = now.Add(time.Duration(r.IntN(4)) * time.Second)
				c := &Change{}
				m.Apply(c, [][]Observation{batch}, nil, now)
				m.Expire(c, now)
				m.Verify()
			}
			// Long after: every rollout is final, and those quiet long
			// enough settle, their neighbours evaluated again.
			now = now.Add(time.Hour)
			c := &Change{}
			m.Expire(c, now)
			m.Settle(c, now, func() bool { return false })
			m.Verify()
		})
	}
}

// TestFlipSharesTheList: the layers behind are a new list once one
// applies (views hold the old one), sharing the old array when the one
// taken out is the first or the last.
func TestFlipSharesTheList(t *testing.T) {
	names := []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	first := flip(names, "ns/a", false)
	if !reflect.DeepEqual(first, []string{"ns/b", "ns/c", "ns/d"}) || &first[0] != &names[1] {
		t.Fatalf("first taken out: %v", first)
	}
	last := flip(names, "ns/d", false)
	if !reflect.DeepEqual(last, []string{"ns/a", "ns/b", "ns/c"}) || &last[0] != &names[0] || cap(last) != 3 {
		t.Fatalf("last taken out: %v (cap %d)", last, cap(last))
	}
	mid := flip(names, "ns/b", false)
	back := flip(mid, "ns/b", true)
	if !reflect.DeepEqual(mid, []string{"ns/a", "ns/c", "ns/d"}) || !reflect.DeepEqual(back, names) {
		t.Fatalf("b out: %v, back in: %v", mid, back)
	}
	if !reflect.DeepEqual(names, []string{"ns/a", "ns/b", "ns/c", "ns/d"}) || !reflect.DeepEqual(mid, []string{"ns/a", "ns/c", "ns/d"}) {
		t.Fatalf("a list a view holds changed: %v, %v", names, mid)
	}
	if got := flip(names, "ns/b", true); &got[0] != &names[0] {
		t.Fatal("putting back a layer already behind copied the list")
	}
	if got := flip([]string{"ns/a"}, "ns/a", false); got != nil {
		t.Fatalf("no layer behind: %v, want nil", got)
	}
}

// TestEarliestGoesStale: when the slots holding the least move elsewhere,
// the least is unknown until a slot as early comes, or the slots are read
// again.
func TestEarliestGoesStale(t *testing.T) {
	at := func(s int) time.Time { return mt0.Add(time.Duration(s) * time.Second) }
	var x earliest
	x.add(at(5))
	x.add(at(5))
	x.add(at(9))
	if x.min != at(5) || x.atMin != 2 || x.n != 3 {
		t.Fatalf("%+v", x)
	}
	t1 := &tally{nexts: map[string]*earliest{"h": &x}}
	t1.removeNext(logEntry{at(5), "h"})
	if x.stale {
		t.Fatal("stale while a slot still holds the least")
	}
	t1.removeNext(logEntry{at(5), "h"})
	if !x.stale || x.n != 1 {
		t.Fatalf("not stale once no slot holds the least: %+v", x)
	}
	x.add(at(7)) // later than the old least, maybe not the least of all
	if !x.stale {
		t.Fatal("a later time made the least known")
	}
	x.add(at(4))
	if x.stale || x.min != at(4) || x.atMin != 1 || x.n != 3 {
		t.Fatalf("an earlier time is the least: %+v", x)
	}
	t1.removeNext(logEntry{at(4), "h"})
	t1.removeNext(logEntry{at(7), "h"})
	t1.removeNext(logEntry{at(9), "h"})
	if _, ok := t1.nexts["h"]; ok {
		t.Fatal("a revision no slot moved to is still tallied")
	}
}

// BenchmarkApplyWidth is the model alone (no store) with revisions
// rolling across 50 and 1,000 layers, one event a batch: the cost of an
// event must not grow with the width of its rollout. Overlapping, a new
// revision comes every 60 s while each takes 100 s to reach the last of
// 1,000 layers: layers report an older revision while a newer one is
// under way (what a family reads, family.go).
func BenchmarkApplyWidth(b *testing.B) {
	for _, bc := range []struct {
		width, every int
		name         string
	}{{50, 600, "layers=50"}, {1000, 600, "layers=1000"}, {1000, 60, "layers=1000/overlapping"}} {
		width := bc.width
		b.Run(bc.name, func(b *testing.B) {
			m, err := NewModel(Config{StuckAfter: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			obs := make([]Observation, 0, b.N)
			for rev := 0; len(obs) < b.N; rev++ {
				hash := fmt.Sprintf("b%d", rev)
				for l := 0; l < width && len(obs) < b.N; l++ {
					name, sec := fmt.Sprintf("l%04d", l), rev*bc.every+l/10
					obs = append(obs, stepObs(name, hash, sec, SignalWaiting), stepObs(name, hash, sec+1, SignalProgressing),
						stepObs(name, hash, sec+2, SignalSucceeded))
				}
			}
			obs = obs[:b.N]
			for i := range obs {
				if err := m.Normalise(&obs[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range obs {
				m.Apply(&Change{}, [][]Observation{obs[i : i+1]}, nil, obs[i].At)
			}
		})
	}
}

// BenchmarkFirstEvaluation is a new revision's first event, after the
// revision before it applied on every one of 20 and 1,000 layers: its
// first evaluation reads every layer of its family (what each was at,
// expected), the one cost of an event that grows with the width. Each
// revision rolls out untimed before the next; the model starts afresh
// every 50, so that its history stays what a live service holds.
func BenchmarkFirstEvaluation(b *testing.B) {
	for _, width := range []int{20, 1000} {
		b.Run(fmt.Sprintf("layers=%d", width), func(b *testing.B) {
			var m *Model
			sec := 0
			apply := func(o Observation) {
				if err := m.Normalise(&o); err != nil {
					b.Fatal(err)
				}
				m.Apply(&Change{}, [][]Observation{{o}}, nil, o.At)
			}
			roll := func(hash string) {
				for l := range width {
					apply(stepObs(fmt.Sprintf("l%04d", l), hash, sec, SignalSucceeded))
					sec++
				}
			}
			for i := range b.N {
				if i%50 == 0 {
					b.StopTimer()
					var err error
					if m, err = NewModel(Config{StuckAfter: time.Hour}); err != nil {
						b.Fatal(err)
					}
					roll("r0")
					b.StartTimer()
				}
				hash := fmt.Sprintf("r%d", i+1)
				apply(stepObs("l0000", hash, sec, SignalProgressing))
				b.StopTimer()
				roll(hash)
				b.StartTimer()
			}
		})
	}
}

// TestStaleEarliestIsReadAgain: a revision learnt late between a's and c's
// on the layer that moved to c first leaves c's earliest move unknown to
// the tally; a's view must then read it again (110 s, after a's deadline)
// rather than keep the old one (100 s, before it), which would make a's
// verdict superseded.
func TestStaleEarliestIsReadAgain(t *testing.T) {
	v := viewOfA(t, 105*time.Second,
		stepObs("l3", "b", -10, SignalSucceeded), // b began before a: it does not supersede a
		stepObs("l1", "a", 0, SignalSucceeded),
		stepObs("l2", "a", 0, SignalProgressing),
		stepObs("l1", "c", 100, SignalProgressing),
		stepObs("l2", "c", 110, SignalProgressing),
		stepObs("l1", "b", 50, SignalProgressing), // l1 moved from a to b, not c
	)
	// c replaced a on every layer, after a's deadline: a newer revision,
	// not a's verdict.
	if v.Verdict != VerdictApplying || v.SupersededBy == nil || *v.SupersededBy != "main@sha1:c" {
		t.Fatalf("a is %s, superseded by %v; want applying, superseded by c", v.Verdict, v.SupersededBy)
	}
}

// TestRootCauseFollowsDependencies: when a layer applies, the layers
// depending on it can be the root cause without an event of their own,
// in another block of the tally too.
func TestRootCauseFollowsDependencies(t *testing.T) {
	app := stepObs("app", "a", 0, SignalExpected)
	app.DependsOn = []string{"flux-system/base"}
	var obs []Observation
	for i := range 2*tallyBlock - 1 { // applied, before app: app ends block 1, base begins block 2
		obs = append(obs, stepObs(fmt.Sprintf("a%d", i), "a", 0, SignalExpected), stepObs(fmt.Sprintf("a%d", i), "a", 1, SignalSucceeded))
	}
	obs = append(obs,
		app, stepObs("base", "a", 0, SignalExpected), stepObs("x", "a", 0, SignalExpected),
		stepObs("x", "a", 1, SignalWaiting),
		stepObs("base", "a", 2, SignalProgressing),
		stepObs("base", "a", 3, SignalSucceeded),
	)
	// app (pending) weighs less than x (waiting on a dependency).
	if v := viewOfA(t, time.Hour, obs...); v.RootCause != "flux-system/app" {
		t.Fatalf("root cause %q, want flux-system/app", v.RootCause)
	}
}

// TestEarlierMoveIsSeen: an event older than the first a layer reported
// for the revision it moved to moves that revision's earliest move
// earlier: here before a's deadline, so a was superseded.
func TestEarlierMoveIsSeen(t *testing.T) {
	v := viewOfA(t, 105*time.Second,
		stepObs("l1", "a", 0, SignalSucceeded),
		stepObs("l2", "a", 0, SignalProgressing),
		stepObs("l2", "c", 120, SignalProgressing),
		stepObs("l1", "c", 110, SignalProgressing),
		stepObs("l1", "c", 100, SignalWaiting),
	)
	if v.Verdict != VerdictSuperseded {
		t.Fatalf("a is %s, want superseded", v.Verdict)
	}
}

// TestRootCauseInACycle: when every layer behind waits on another, the
// first of them is named.
func TestRootCauseInACycle(t *testing.T) {
	b, c := stepObs("b", "a", 0, SignalExpected), stepObs("c", "a", 0, SignalExpected)
	b.DependsOn, c.DependsOn = []string{"flux-system/c"}, []string{"flux-system/b"}
	v := viewOfA(t, time.Hour,
		stepObs("a", "a", 0, SignalExpected), b, c,
		stepObs("a", "a", 1, SignalSucceeded),
		stepObs("c", "a", 2, SignalWaiting),
	)
	if v.RootCause != "flux-system/b" {
		t.Fatalf("root cause %q, want flux-system/b", v.RootCause)
	}
}

// viewOfA applies obs one batch each, checking every view against the
// reference after each, and returns rollout a's view.
func viewOfA(t *testing.T, stuckAfter time.Duration, obs ...Observation) *View {
	t.Helper()
	m, err := NewModel(Config{StuckAfter: stuckAfter, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range obs {
		if err := m.Normalise(&o); err != nil {
			t.Fatal(err)
		}
		m.Apply(&Change{}, [][]Observation{{o}}, nil, mt0.Add(time.Minute))
		m.Verify()
	}
	return m.clusters["prod"].rollouts["a"].view
}
