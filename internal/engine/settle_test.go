package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// movingClock is Flux's time as a stream replays: the latest evidence seen
// plus a lag, as a live service would see it.
type movingClock struct{ ns atomic.Int64 }

func (c *movingClock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *movingClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *movingClock) advance(o time.Time) { c.set(maxTime(c.now(), o)) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func settleConfig(after time.Duration) rollout.Config {
	cfg := defaultConfig()
	cfg.SettleAfter = after
	return cfg
}

// never is a SettleAfter no test history reaches: the engine keeps every
// rollout live, as before settling existed.
const never = 100000 * time.Hour

func settle(t testing.TB, e *engine.Engine) {
	t.Helper()
	if err := e.Settle(context.Background()); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// TestSettlingChangesNoVerdict is the property of issue 10: an engine that
// settles rollouts as the history goes by (with the clock following Flux's
// time, a settle pass after every few observations, and a restart in the
// middle) ends with exactly the views of one that never settles, and so
// does a rebuild of it from its file.
func TestSettlingChangesNoVerdict(t *testing.T) {
	settledSome := false
	for name, obs := range propertyStreams(t, longSynthetic, 11) {
		t.Run(name, func(t *testing.T) {
			end := obs[0].At
			for _, o := range obs {
				end = maxTime(end, o.At)
			}
			final := end.Add(3 * time.Hour)

			ref := start(t, t.TempDir(), settleConfig(never), fixedClock(final))
			ref.submit(obs...)
			ref.stop()
			ref = start(t, ref.dir, settleConfig(never), fixedClock(final))
			revisited := revisitedHashes(obs)
			want := comparable(t, ref.engine, revisited)

			for _, after := range []time.Duration{time.Minute, 20 * time.Minute} {
				clock := &movingClock{}
				clock.set(obs[0].At)
				cfg := settleConfig(after)
				dir := t.TempDir()
				h := start(t, dir, cfg, clock.now)
				for i, o := range obs {
					clock.advance(o.At.Add(10 * time.Second))
					h.submit(o)
					if i%7 == 6 {
						settle(t, h.engine)
					}
					if i == len(obs)/2 {
						h.stop()
						h = start(t, dir, cfg, clock.now)
					}
				}
				settled := h.engine.Stats().Settled.Load()
				h.stop()
				// At the same time as the reference, everything that can
				// settle has (NewEngine runs a pass).
				h = start(t, dir, cfg, fixedClock(final))
				if got := comparable(t, h.engine, revisited); got != want {
					t.Fatalf("settle after %s: views differ from an engine that never settles:\n%s", after, firstDiff(want, got))
				}
				if settled+h.engine.Stats().Settled.Load() > 0 {
					settledSome = true
				}
			}
		})
	}
	if !settledSome {
		t.Fatal("no rollout was ever settled: the property was not exercised")
	}
}

// revisitedHashes are the revisions an emitter reported again after it
// had reported a later one (a rollback to an old commit): once settled,
// such a revision keeps its final view, where an engine that never
// settles would refresh its last evidence.
func revisitedHashes(obs []rollout.Observation) map[string]bool {
	byEmitter := map[rollout.Emitter][]rollout.Observation{}
	for _, o := range obs {
		byEmitter[o.Emitter] = append(byEmitter[o.Emitter], o)
	}
	out := map[string]bool{}
	for _, os := range byEmitter {
		slices.SortStableFunc(os, func(a, b rollout.Observation) int { return a.At.Compare(b.At) })
		left := map[string]bool{} // hashes the emitter reported and then left
		for i, o := range os {
			if left[o.Hash] {
				out[o.Hash] = true
			}
			if i > 0 && os[i-1].Hash != o.Hash {
				left[os[i-1].Hash] = true
			}
		}
	}
	return out
}

// comparable renders every view, as snapshotJSON does, with the fields a
// revisit refreshes (last evidence, the latest mark of each layer) blanked
// for revisited revisions: their verdicts, layers' states and failures
// must still be equal.
func comparable(t *testing.T, e *engine.Engine, revisited map[string]bool) string {
	t.Helper()
	views := enginetest.List(t, e, "", 1<<20)
	for i, v := range views {
		if !revisited[v.Hash] {
			continue
		}
		c := *v
		c.LastSeen = time.Time{}
		layers := v.Layers.Slice()
		for j := range layers {
			layers[j].At, layers[j].Message, layers[j].Reason = nil, "", ""
		}
		c.Layers = rollout.MakeLayers(layers)
		c.Failures = slices.Clone(v.Failures)
		for j := range c.Failures {
			c.Failures[j].LastAt = time.Time{}
		}
		views[i] = &c
	}
	b, err := json.MarshalIndent(views, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// longSynthetic is synthetic's history, but with its revisions spread
// over hours, so that the earlier ones settle while the later ones apply.
func longSynthetic(r *rand.Rand) []rollout.Observation {
	obs := synthetic(r)
	for i := range obs {
		// synthetic's revisions start 10 to 50 s apart: stretch them.
		sec := obs[i].At.Sub(t0)
		obs[i].At = t0.Add(sec * 90)
	}
	return obs
}

// TestSettledRolloutsLeaveMemory: a long history of clean rollouts keeps
// only the live ones in memory, and a restart loads only those; every
// revision is still answered, from the archive.
func TestSettledRolloutsLeaveMemory(t *testing.T) {
	layers := []string{"infra", "platform", "apps"}
	var obs []rollout.Observation
	for i := range 40 {
		label := fmt.Sprintf("H%d", i)
		at := i * 3600
		for j, l := range layers {
			obs = append(obs, prog(l, label, at+10*j), succ(l, label, at+10*j+5))
		}
	}
	end := t0.Add(40 * time.Hour)
	cfg := settleConfig(time.Minute)
	dir := t.TempDir()
	h := start(t, dir, cfg, fixedClock(end))
	h.submit(obs...)
	settle(t, h.engine)
	if live := sum(h.engine.Live()); live > 2 {
		t.Fatalf("%d rollouts live after settling, want at most 2 (the current one and its predecessor)", live)
	}
	h.stop()
	h = start(t, dir, cfg, fixedClock(end))
	if live := sum(h.engine.Live()); live > 2 {
		t.Fatalf("%d rollouts loaded at start, want only the live ones", live)
	}
	for i := range 40 {
		if v := h.view(fmt.Sprintf("H%d", i)); v.Verdict != rollout.VerdictApplied || v.Layers.Len() != 3 {
			t.Fatalf("H%d: %s with %d layers", i, v.Verdict, v.Layers.Len())
		}
	}
	if got := enginetest.List(t, h.engine, "", 5); len(got) != 5 || got[0].Hash != hashOf("H39") || got[4].Hash != hashOf("H35") {
		t.Fatalf("List of live and settled, newest first: %v", hashes(got))
	}
}

func sum(m map[rollout.Verdict]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func hashes(vs []*rollout.View) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Hash[:7])
	}
	return out
}

// TestSettledLookups: the archive answers exact hashes, prefixes, origin
// revisions and ambiguity across clusters the way live rollouts do, and
// Wait returns a settled verdict at once.
func TestSettledLookups(t *testing.T) {
	cfg := settleConfig(time.Minute)
	h := start(t, t.TempDir(), cfg, fixedClock(t0.Add(10*time.Hour)))
	oci := func(label, origin string, sec int) rollout.Observation {
		o := succ("apps", label, sec)
		o.Revision, o.Hash = "latest@sha256:"+hashOf(label)+hashOf(label)[:24], hashOf(label)+hashOf(label)[:24]
		o.Origin, o.OriginHash = revOf(origin), hashOf(origin)
		return o
	}
	a, b, c := oci("A", "gitA", 0), oci("B", "gitB", 3600), oci("C", "gitC", 7200)
	stagingA := succ("apps", "S", 0)
	stagingA.Cluster, stagingA.Revision, stagingA.Hash = "staging", a.Revision, a.Hash
	stagingB := succ("apps", "S", 3600)
	stagingB.Cluster = "staging"
	h.submit(a, b, c, stagingA, stagingB)
	settle(t, h.engine)
	if live := h.engine.Live(); sum(live) != 2 {
		t.Fatalf("live %v, want the current revision of each cluster", live)
	}
	if v, err := h.engine.Lookup(engine.Query{Hash: hashOf("gitA")}); err != nil || v.Hash != a.Hash {
		t.Fatalf("settled, by origin revision: %v, %v", v, err)
	}
	if v, err := h.engine.Lookup(engine.Query{Hash: hashOf("B")[:8], Prefix: true}); err != nil || v.Hash != b.Hash || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("settled, by prefix: %v, %v", v, err)
	}
	var amb *engine.AmbiguousError
	if _, err := h.engine.Lookup(engine.Query{Hash: a.Hash}); !errors.As(err, &amb) || len(amb.Matches) != 2 {
		t.Fatalf("one hash settled on two clusters: %v, want ambiguous", err)
	}
	if v, err := h.engine.Lookup(engine.Query{Hash: a.Hash, Cluster: "staging"}); err != nil || v.Cluster != "staging" {
		t.Fatalf("settled on one cluster: %v, %v", v, err)
	}
	if v := h.engine.Get(rollout.Key{Cluster: "default", Hash: a.Hash}); v == nil || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("Get of a settled rollout: %v", v)
	}
	// Wait returns the latest answer when its context ends, too: it must
	// return before that, on the settled verdict.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v, err := h.engine.Wait(ctx, engine.Query{Hash: hashOf("gitB")}); err != nil || v.Hash != b.Hash || ctx.Err() != nil {
		t.Fatalf("Wait on a settled rollout: %v, %v (context: %v)", v, err, ctx.Err())
	}
}

// TestEvidenceAboutSettledHistoryIsIgnored: a late event for a settled
// rollout, or for a revision new to a layer and older than what it settled,
// is acknowledged and changes nothing: no rollout is made from part of a
// history that is gone, so none can turn applied on too few layers, and no
// mail goes out again.
func TestEvidenceAboutSettledHistoryIsIgnored(t *testing.T) {
	cfg := settleConfig(time.Minute)
	cfg.MailTo = []string{"dev@example.com"}
	te := enginetest.Start(t, t.TempDir(), cfg, fixedClock(t0.Add(10*time.Hour)), true)
	submit := func(obs ...rollout.Observation) {
		t.Helper()
		for _, o := range obs {
			if err := te.Submit(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(applied0...)
	submit(succ("infra", "R1", 3600), succ("platform", "R1", 3601), succ("apps", "R1", 3602))
	submit(succ("infra", "R2", 7200), succ("platform", "R2", 7201), succ("apps", "R2", 7202))
	settle(t, te.Engine)
	if te.Stats().Settled.Load() == 0 {
		t.Fatal("nothing settled")
	}
	if v := te.Get(rollout.Key{Cluster: "default", Hash: hashOf("R1")}); v == nil || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("R1 %v", v)
	}
	mails := te.Queued(t, hashOf("R1"))

	// A late failure for settled R1; a revision never seen whose only
	// evidence is older than what infra settled; and one placed between
	// settled R1 and live R2 on infra. Made a rollout, MID would expect
	// infra alone (R1, whose layers it must reach, is gone) and read
	// applied.
	ignored := te.Stats().Ignored.Load()
	submit(fail("apps", "R1", 3700, "HealthCheckFailed"), succ("infra", "OLD", 1800), succ("infra", "MID", 5000))
	if got := te.Stats().Ignored.Load() - ignored; got != 3 {
		t.Fatalf("%d observations ignored, want 3", got)
	}
	if _, err := te.Lookup(engine.Query{Hash: hashOf("MID")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a rollout was made after settled history, without its predecessor: %v", err)
	}
	if v := te.Get(rollout.Key{Cluster: "default", Hash: hashOf("R1")}); v.Verdict != rollout.VerdictApplied || len(v.Failures) != 0 {
		t.Fatalf("settled R1 changed: %s %+v", v.Verdict, v.Failures)
	}
	if _, err := te.Lookup(engine.Query{Hash: hashOf("OLD")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a rollout was made of settled history: %v", err)
	}
	if got := te.Queued(t, hashOf("R1")); !slices.Equal(got, mails) {
		t.Fatalf("mails of R1 %v, then %v", mails, got)
	}
	// A new revision is still taken: it is newer than every floor.
	submit(succ("infra", "R3", 10800))
	if v := te.Get(rollout.Key{Cluster: "default", Hash: hashOf("R3")}); v == nil {
		t.Fatal("a new revision was ignored")
	}
}

// TestSettlingKeepsWhatAnOlderRolloutReads: a layer reported Y, then had
// only a membership mark for P (suspended there, so P does not expect it),
// then reported r. For Y the layer moved on at r, so Y is superseded rather
// than still applying. r settling must not take that away while Y is live
// (another layer is still at Y): r stays live as long as Y reads it.
func TestSettlingKeepsWhatAnOlderRolloutReads(t *testing.T) {
	mark := func(name, label string, sec int) rollout.Observation {
		return ob(name, label, sec, rollout.SignalExpected, "", "")
	}
	obs := []rollout.Observation{
		mark("apps", "Y", 0), mark("edge", "Y", 0), prog("apps", "Y", 1), succ("edge", "Y", 2),
		ob("apps", "P", 100, rollout.SignalSuspended, "", ""),
		mark("apps", "r", 200), prog("apps", "r", 201), succ("apps", "r", 202),
		mark("apps", "T", 300),
	}
	final := t0.Add(10 * time.Hour)
	ref := start(t, t.TempDir(), settleConfig(never), fixedClock(final))
	ref.submit(obs...)
	if v := ref.view("Y"); v.Verdict != rollout.VerdictSuperseded {
		t.Fatalf("Y is %s, want superseded (the setting of the test)", v.Verdict)
	}
	want := snapshotJSON(t, ref.engine)

	cfg := settleConfig(time.Minute)
	h := start(t, t.TempDir(), cfg, fixedClock(final))
	h.submit(obs...)
	settle(t, h.engine)
	h.stop()
	h = start(t, h.dir, cfg, fixedClock(final))
	if got := snapshotJSON(t, h.engine); got != want {
		t.Fatalf("settling changed a live view:\n%s", firstDiff(want, got))
	}
}

// TestSettlePassIsBounded: a backlog of rollouts to settle is settled in
// slices, each pass stopping once it has taken settleBudget by the
// engine's clock, so that the batches queued behind a pass are not held up
// for long; the passes that follow finish it.
func TestSettlePassIsBounded(t *testing.T) {
	layers := []string{"infra", "platform", "apps"}
	var obs []rollout.Observation
	for i := range 40 {
		label := fmt.Sprintf("H%d", i)
		for j, l := range layers {
			obs = append(obs, prog(l, label, i*3600+10*j), succ(l, label, i*3600+10*j+5))
		}
	}
	// Every reading of this clock takes a millisecond.
	var ticks atomic.Int64
	end := t0.Add(40 * time.Hour)
	clock := func() time.Time { return end.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	// Without Run: its own passes, every settleEvery of wall time and then
	// every settleSoon while a backlog remains, would add to the count of
	// the one pass this test makes whenever the submits take longer than
	// settleEvery (as on a loaded machine with -race).
	te := enginetest.Start(t, t.TempDir(), settleConfig(time.Minute), clock, false)
	h := &harness{t: t, engine: te.Engine}
	h.submit(obs...)
	settle(t, h.engine)
	if n := h.engine.Stats().Settled.Load(); n == 0 || n > 10 {
		t.Fatalf("one pass settled %d of the 38 rollouts that can settle, want a few", n)
	}
	for pass := 0; pass < 100 && sum(h.engine.Live()) > 2; pass++ {
		settle(t, h.engine)
	}
	if live := sum(h.engine.Live()); live > 2 {
		t.Fatalf("%d rollouts live after the passes that followed, want 2", live)
	}
}

// TestSettlePassGoesOn: a pass that runs out of time leaves off where it
// stopped and the next goes on from there. The oldest live rollouts here
// can never settle (each is the only revision its layer reported); passes
// that each began at the oldest checked only those and never settled the
// later ones.
func TestSettlePassGoesOn(t *testing.T) {
	var obs []rollout.Observation
	for i := range 20 {
		obs = append(obs, succ(fmt.Sprintf("lone-%02d", i), fmt.Sprintf("L%d", i), i))
	}
	for i := range 10 {
		obs = append(obs, prog("apps", fmt.Sprintf("H%d", i), 3600+i*600), succ("apps", fmt.Sprintf("H%d", i), 3600+i*600+5))
	}
	// Every reading of this clock takes a millisecond: a pass checks a
	// rollout or two.
	var ticks atomic.Int64
	end := t0.Add(40 * time.Hour)
	clock := func() time.Time { return end.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	h := start(t, t.TempDir(), settleConfig(time.Minute), clock)
	h.submit(obs...)
	for range 100 {
		settle(t, h.engine)
	}
	// The lone ones and H9, whose layer is still at it.
	if live := sum(h.engine.Live()); live != 21 {
		t.Fatalf("%d rollouts live after 100 passes, want 21", live)
	}
	if n := h.engine.Stats().Settled.Load(); n != 9 {
		t.Fatalf("%d rollouts settled, want H0 to H8", n)
	}
}

// TestIdleEvaluationsAreDroppedSafely: the evaluation a final rollout
// keeps is dropped once it has been idle, but not while one of its expected
// layers has no evidence: a revision that layer reports later still changes
// the rollout's view (it names what superseded it), and only the index of
// silent layers finds the rollout then. The engine checks every view
// against a fresh evaluation (Verify), which fails when the stale view is
// kept.
func TestIdleEvaluationsAreDroppedSafely(t *testing.T) {
	var clock movingClock
	clock.set(t0)
	h := start(t, t.TempDir(), settleConfig(never), clock.now)
	// P reached both layers; A only infra, and is stuck at its deadline.
	h.submit(succ("infra", "P", 0), succ("apps", "P", 5), succ("infra", "A", 60))
	clock.set(t0.Add(31 * time.Minute))
	h.submit(prog("infra", "A", 1900)) // evaluated past its deadline
	if v := h.view("A"); v.Verdict != rollout.VerdictStuck || v.SupersededBy != nil {
		t.Fatalf("A: %s, superseded by %v; want stuck, by nothing", v.Verdict, v.SupersededBy)
	}
	// Idle long enough for its evaluation to be dropped, were it not
	// silent on apps.
	clock.set(t0.Add(time.Hour))
	settle(t, h.engine)
	h.submit(prog("apps", "B", 120))
	if v := h.view("A"); v.SupersededBy == nil || *v.SupersededBy != revOf("B") {
		t.Fatalf("A superseded by %v, want B", v.SupersededBy)
	}
}

// TestRebuiltCommitIsOneVerdict: one commit pushed again under a new
// digest (a CI re-run) is one verdict on its cluster, the newest
// artifact's, whether the older is settled or live, by the whole hash or a
// prefix, in Lookup, LookupAll and Wait; on two clusters it is two, and a
// lookup without a cluster is ambiguous as for any commit on two.
func TestRebuiltCommitIsOneVerdict(t *testing.T) {
	cfg := settleConfig(time.Minute)
	cfg.CommitOf = flux.GitCommit
	h := start(t, t.TempDir(), cfg, fixedClock(t0.Add(10*time.Hour)))
	oci := func(cluster, label, origin string, sec int) rollout.Observation {
		o := succ("apps", label, sec)
		o.Cluster = cluster
		o.Revision, o.Hash = "latest@sha256:"+hashOf(label)+hashOf(label)[:24], hashOf(label)+hashOf(label)[:24]
		o.Origin, o.OriginHash = revOf(origin), hashOf(origin)
		return o
	}
	first, again, latest := oci("default", "D1", "commit", 0), oci("default", "D2", "commit", 3600), oci("default", "D3", "commit", 7200)
	h.submit(first, again)
	settle(t, h.engine) // first is settled, again live
	h.submit(latest)
	for _, q := range []engine.Query{{Hash: hashOf("commit")}, {Hash: hashOf("commit")[:9], Prefix: true}, {Hash: hashOf("commit"), Cluster: "default"}} {
		v, err := h.engine.Lookup(q)
		if err != nil || v.Hash != latest.Hash || v.Commit != hashOf("commit") {
			t.Fatalf("Lookup %+v: %v, %v; want the newest artifact's rollout, naming the commit it deployed", q, v, err)
		}
		all, err := h.engine.LookupAll(q)
		if err != nil || len(all) != 1 || all[0].Hash != latest.Hash {
			t.Fatalf("LookupAll %+v: %v, %v; want one verdict, the newest's", q, all, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v, err := h.engine.Wait(ctx, engine.Query{Hash: hashOf("commit")}); err != nil || v.Hash != latest.Hash || ctx.Err() != nil {
		t.Fatalf("Wait: %v, %v (context: %v)", v, err, ctx.Err())
	}
	// Each artifact stays findable by its own digest.
	if v, err := h.engine.Lookup(engine.Query{Hash: first.Hash}); err != nil || v.Hash != first.Hash || v.Commit != hashOf("commit") {
		t.Fatalf("the first artifact by its digest, settled: %v, %v", v, err)
	}
	// An artifact that names no commit deploys none a repository holds.
	bare := succ("apps", "B1", 7250)
	bare.Revision, bare.Hash = "latest@sha256:"+hashOf("B1")+hashOf("B1")[:24], hashOf("B1")+hashOf("B1")[:24]
	h.submit(bare)
	if v, err := h.engine.Lookup(engine.Query{Hash: bare.Hash}); err != nil || v.Commit != "" {
		t.Fatalf("an artifact without origin: %+v, %v; want no commit", v, err)
	}
	h.submit(oci("staging", "S1", "commit", 7300))
	var amb *engine.AmbiguousError
	if _, err := h.engine.Lookup(engine.Query{Hash: hashOf("commit")}); !errors.As(err, &amb) {
		t.Fatalf("one commit on two clusters: %v, want ambiguous", err)
	}
	if all, err := h.engine.LookupAll(engine.Query{Hash: hashOf("commit")}); err != nil || len(all) != 2 || all[0].Hash != latest.Hash {
		t.Fatalf("LookupAll on two clusters: %v, %v", all, err)
	}
}
