package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// observations decodes captured requests the way the webhook does.
func observations(t *testing.T, reqs []fixture.Request) []rollout.Observation {
	t.Helper()
	var out []rollout.Observation
	for _, r := range reqs {
		d, err := flux.Decode([]byte(r.Body))
		if err != nil {
			t.Fatalf("fixture seq %d: %v", r.Seq, err)
		}
		if o, ok := ingest.Event(d); ok {
			out = append(out, o)
		}
	}
	return out
}

func scenario(t *testing.T, name string, emitted bool) []rollout.Observation {
	t.Helper()
	read := fixture.Received
	if emitted {
		read = fixture.Emitted
	}
	reqs, err := read(name)
	if err != nil {
		t.Fatal(err)
	}
	return observations(t, reqs)
}

// labels maps R0..R8 to hashes from the scenarios' meta.json.
func labels(t *testing.T, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		m, err := fixture.ReadMeta(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Published {
			r, err := flux.ParseRevision(p.Revision)
			if err != nil {
				t.Fatal(err)
			}
			out[p.Label] = r.Hash
		}
	}
	return out
}

var fixtureEnd = time.Date(2026, 11, 30, 12, 49, 0, 0, time.UTC)

type expectation struct {
	label   string
	verdict rollout.Verdict
	check   func(t *testing.T, v *rollout.View, rev map[string]string)
}

// mainRunTruth is what really happened in the main capture run (the
// fixtures' README), as events alone can know it.
var mainRunTruth = []expectation{
	{label: "R0", verdict: rollout.VerdictApplied},
	{label: "R1", verdict: rollout.VerdictApplied},
	{label: "R2", verdict: rollout.VerdictFailed, check: func(t *testing.T, v *rollout.View, _ map[string]string) {
		if len(v.Failures) != 1 {
			t.Fatalf("R2 failures %+v", v.Failures)
		}
		f := v.Failures[0]
		if f.Layer != "flux-system/apps" || f.Reason != "PruneFailed" || len(f.Objects) != 1 {
			t.Fatalf("R2 failure %+v", f)
		}
		o := f.Objects[0]
		if o.Kind != "ConfigMap" || o.Namespace != "acc-apps" || o.Name != "app-protected" || o.Error == "" {
			t.Fatalf("R2 prune object %+v", o)
		}
		if layerState(v, "apps") != rollout.LayerRecovered {
			t.Fatalf("apps recovered on R2 but shows %s", layerState(v, "apps"))
		}
	}},
	{label: "R3", verdict: rollout.VerdictFailed, check: func(t *testing.T, v *rollout.View, _ map[string]string) {
		if len(v.Failures) != 1 || v.Failures[0].Layer != "flux-system/platform" || v.Failures[0].Reason != "HealthCheckFailed" {
			t.Fatalf("R3 failures %+v", v.Failures)
		}
	}},
	{label: "R4", verdict: rollout.VerdictFailed, check: func(t *testing.T, v *rollout.View, rev map[string]string) {
		if v.SupersedeKey == nil || v.SupersedeKey.Hash != rev["R5"] {
			t.Fatalf("R4 superseded_by %v, want R5", v.SupersededBy)
		}
	}},
	{label: "R5", verdict: rollout.VerdictFailed},
	{label: "R6", verdict: rollout.VerdictApplied},
	{label: "R7", verdict: rollout.VerdictApplied},
	{label: "R8", verdict: rollout.VerdictApplied},
}

func checkTruth(t *testing.T, h *harness, rev map[string]string, truth []expectation) {
	t.Helper()
	for _, x := range truth {
		v, err := h.engine.Lookup(engine.Query{Hash: rev[x.label]})
		if err != nil {
			t.Fatalf("%s: %v", x.label, err)
		}
		if v.Verdict != x.verdict {
			t.Errorf("%s: verdict %s (%s), want %s", x.label, v.Verdict, v.Summary, x.verdict)
			continue
		}
		if x.check != nil {
			x.check(t, v, rev)
		}
	}
}

func TestFixturesMainRun(t *testing.T) {
	rev := labels(t, fixture.Scenarios...)
	for _, emitted := range []bool{false, true} {
		t.Run(fmt.Sprintf("emitted=%v", emitted), func(t *testing.T) {
			h := start(t, t.TempDir(), defaultConfig(), fixedClock(fixtureEnd))
			for _, name := range fixture.Scenarios {
				h.submit(scenario(t, name, emitted)...)
			}
			checkTruth(t, h, rev, mainRunTruth)
		})
	}
}

// TestFixturesCheckpoints checks verdicts in the middle of the run, when
// later scenarios have not happened yet.
func TestFixturesCheckpoints(t *testing.T) {
	rev := labels(t, fixture.Scenarios...)
	upTo := func(last string) []rollout.Observation {
		var obs []rollout.Observation
		for _, name := range fixture.Scenarios {
			obs = append(obs, scenario(t, name, false)...)
			if name == last {
				break
			}
		}
		return obs
	}
	t.Run("prune failed, before the recovery", func(t *testing.T) {
		h := start(t, t.TempDir(), defaultConfig(), fixedClock(fixtureEnd))
		h.submit(upTo("prune-failed")...)
		v, _ := h.engine.Lookup(engine.Query{Hash: rev["R2"]})
		if v.Verdict != rollout.VerdictFailed || layerState(v, "apps") != rollout.LayerFailed {
			t.Fatalf("R2 %s, apps %s", v.Verdict, layerState(v, "apps"))
		}
	})
	t.Run("suspended layer, events only: applying, then stuck naming apps", func(t *testing.T) {
		h := start(t, t.TempDir(), defaultConfig(), fixedClock(fixtureEnd))
		h.submit(upTo("suspended")...)
		v, _ := h.engine.Lookup(engine.Query{Hash: rev["R8"]})
		if v.Verdict != rollout.VerdictApplying || !slices.Equal(v.Behind, []string{"flux-system/apps"}) {
			t.Fatalf("R8 %s behind %v", v.Verdict, v.Behind)
		}
		h.stop()
		late := start(t, h.dir, defaultConfig(), fixedClock(fixtureEnd.Add(time.Hour)))
		v, _ = late.engine.Lookup(engine.Query{Hash: rev["R8"]})
		if v.Verdict != rollout.VerdictStuck || v.RootCause != "flux-system/apps" {
			t.Fatalf("R8 %s root cause %q", v.Verdict, v.RootCause)
		}
	})
	t.Run("suspended layer configured as not expected is the cluster's answer", func(t *testing.T) {
		// With cluster access apps (suspended) is not expected; configuring
		// the two active layers gives the same answer from events.
		cfg := defaultConfig()
		cfg.Layers = []rollout.Emitter{layer("infra"), layer("platform")}
		h := start(t, t.TempDir(), cfg, fixedClock(fixtureEnd))
		h.submit(scenario(t, "suspended", false)...)
		if v := h.view8(rev); v.Verdict != rollout.VerdictApplied {
			t.Fatalf("R8 %s: %s", v.Verdict, v.Summary)
		}
	})
}

func (h *harness) view8(rev map[string]string) *rollout.View {
	v, err := h.engine.Lookup(engine.Query{Hash: rev["R8"]})
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func TestFixturesCancelHealthChecks(t *testing.T) {
	const name = "cancel-health-checks/superseded"
	rev := labels(t, name)
	h := start(t, t.TempDir(), defaultConfig(), fixedClock(fixtureEnd))
	h.submit(scenario(t, name, false)...)
	checkTruth(t, h, rev, []expectation{
		{label: "R4", verdict: rollout.VerdictSuperseded, check: func(t *testing.T, v *rollout.View, rev map[string]string) {
			if v.SupersedeKey == nil || v.SupersedeKey.Hash != rev["R5"] || len(v.Failures) != 0 {
				t.Fatalf("R4 %+v", v)
			}
		}},
		{label: "R5", verdict: rollout.VerdictFailed},
	})
}

// snapshotJSON renders every view, for comparing whole states.
func snapshotJSON(t *testing.T, e *engine.Engine) string {
	t.Helper()
	b, err := json.MarshalIndent(enginetest.List(t, e, "", 1<<20), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// shuffled returns obs in a random order with a random third of them
// delivered again, as notification-controller's goroutines and retries do.
func shuffled(r *rand.Rand, obs []rollout.Observation) []rollout.Observation {
	out := slices.Clone(obs)
	for _, o := range obs {
		if r.IntN(3) == 0 {
			out = append(out, o)
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// submitConcurrently delivers obs from several goroutines, so batches mix.
func (h *harness) submitConcurrently(obs []rollout.Observation) {
	var wg sync.WaitGroup
	ch := make(chan rollout.Observation)
	for range 8 {
		wg.Go(func() {
			for o := range ch {
				if err := h.engine.Submit(context.Background(), o); err != nil {
					h.t.Errorf("Submit: %v", err)
				}
			}
		})
	}
	for _, o := range obs {
		ch <- o
	}
	close(ch)
	wg.Wait()
}

// submitBatches submits obs in order, in batches of 1 to 12, as the group
// commit forms them under load.
func (h *harness) submitBatches(r *rand.Rand, obs []rollout.Observation) {
	h.t.Helper()
	for len(obs) > 0 {
		n := min(1+r.IntN(12), len(obs))
		if err := h.engine.SubmitAll(context.Background(), obs[:n]); err != nil {
			h.t.Fatalf("SubmitAll: %v", err)
		}
		obs = obs[n:]
	}
}

// TestOrderAndDuplicatesDoNotMatter is the property of docs/verdicts.md: the
// verdicts are a function of the set of evidence. Every shuffled,
// duplicated, concurrent replay must reach exactly the state of the ordered
// stream, and so must an engine rebuilt from the store.
func TestOrderAndDuplicatesDoNotMatter(t *testing.T) {
	for name, obs := range propertyStreams(t, synthetic, 7) {
		t.Run(name, func(t *testing.T) {
			for _, now := range []time.Time{fixtureEnd, fixtureEnd.Add(2 * time.Hour)} {
				ordered := start(t, t.TempDir(), defaultConfig(), fixedClock(now))
				ordered.submit(obs...)
				want := snapshotJSON(t, ordered.engine)
				ordered.stop()
				reloaded := start(t, ordered.dir, defaultConfig(), fixedClock(now))
				if got := snapshotJSON(t, reloaded.engine); got != want {
					t.Fatalf("engine rebuilt from the store differs from the live one:\n%s", firstDiff(want, got))
				}
				for i := range 3 {
					r := rand.New(rand.NewPCG(uint64(i), uint64(len(obs))))
					h := start(t, t.TempDir(), defaultConfig(), fixedClock(now))
					h.submitConcurrently(shuffled(r, obs))
					if got := snapshotJSON(t, h.engine); got != want {
						t.Fatalf("shuffled replay %d differs from the ordered stream:\n%s", i, firstDiff(want, got))
					}
					// The same, in batches of random size: deterministic, so a
					// history that breaks the dirty tracking breaks it every run
					// (concurrent batches hit such a case only now and then).
					h = start(t, t.TempDir(), defaultConfig(), fixedClock(now))
					h.submitBatches(r, shuffled(r, obs))
					if got := snapshotJSON(t, h.engine); got != want {
						t.Fatalf("shuffled replay %d in batches differs from the ordered stream:\n%s", i, firstDiff(want, got))
					}
				}
			}
		})
	}
}

// propertyStreams are the histories the property tests replay: the main
// fixture run, the cancel-gate fixture, and 30 synthetic histories made by
// synth from seeds salted with salt.
func propertyStreams(t *testing.T, synth func(*rand.Rand) []rollout.Observation, salt uint64) map[string][]rollout.Observation {
	t.Helper()
	streams := map[string][]rollout.Observation{}
	var main []rollout.Observation
	for _, name := range fixture.Scenarios {
		main = append(main, scenario(t, name, false)...)
	}
	streams["fixtures"] = main
	streams["fixtures-cancel"] = scenario(t, "cancel-health-checks/superseded", false)
	for seed := range 30 {
		streams[fmt.Sprintf("synthetic-%d", seed)] = synth(rand.New(rand.NewPCG(uint64(seed), salt)))
	}
	return streams
}

// synthetic makes a plausible multi-revision history: layers of one source
// move through revisions in dependsOn order with random outcomes, plus a
// layer on another source.
func synthetic(r *rand.Rand) []rollout.Observation {
	layers := []string{"infra", "platform", "apps", "tenant"}
	var obs []rollout.Observation
	sec := 0
	for i := range 6 {
		label := fmt.Sprintf("S%d", i)
		start := sec
		if r.IntN(2) == 0 {
			// The cluster reader was running: it says which layers must move,
			// and sometimes one is suspended, or resumed a little later.
			for li, l := range layers {
				var deps []string
				if li > 0 {
					deps = []string{"flux-system/" + layers[li-1]}
				}
				sig := rollout.SignalExpected
				if r.IntN(5) == 0 {
					sig = rollout.SignalSuspended
				}
				m := ob(l, label, start, sig, "", "")
				m.DependsOn = deps
				obs = append(obs, m)
				if r.IntN(4) == 0 {
					m.At, m.Signal = m.At.Add(7*time.Second), rollout.SignalExpected
					obs = append(obs, m)
				}
			}
		}
		for li, l := range layers {
			if r.IntN(8) == 0 {
				continue // suspended, or the event was lost
			}
			obs = append(obs, waiting(l, label, start))
			at := start + 5*li + r.IntN(3)
			obs = append(obs, prog(l, label, at))
			switch r.IntN(6) {
			case 0:
				obs = append(obs, fail(l, label, at+1, "HealthCheckFailed"))
			case 1:
				obs = append(obs, ob(l, label, at+1, rollout.SignalCanceled, "HealthCheckCanceled", "canceled"))
			case 2:
				obs = append(obs, fail(l, label, at+1, "PruneFailed"), succ(l, label, at+60))
			default:
				obs = append(obs, succ(l, label, at+1), succ(l, label, at+300))
			}
		}
		obs = append(obs, succ("other", fmt.Sprintf("Q%d", i%2), start+2))
		sec += 10 + r.IntN(40)
	}
	return obs
}

func firstDiff(a, b string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			lo := max(0, i-300)
			return "want …" + a[lo:min(len(a), i+200)] + "\n got …" + b[lo:min(len(b), i+200)]
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}
