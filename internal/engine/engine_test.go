package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var hashOf = enginetest.Hash

func revOf(label string) string { return "main@sha1:" + hashOf(label) }

func layer(name string) rollout.Emitter {
	return rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: name}
}

func ob(name, label string, sec int, sig rollout.Signal, reason, msg string) rollout.Observation {
	return rollout.Observation{
		Emitter: layer(name), Revision: revOf(label), Hash: hashOf(label),
		At: t0.Add(time.Duration(sec) * time.Second), Signal: sig, Reason: reason, Message: msg,
	}
}

func succ(name, label string, sec int) rollout.Observation {
	return ob(name, label, sec, rollout.SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished in 1s, next run in 5m0s")
}

func prog(name, label string, sec int) rollout.Observation {
	return ob(name, label, sec, rollout.SignalProgressing, "Progressing", "ConfigMap/x/y configured")
}

func waiting(name, label string, sec int) rollout.Observation {
	return ob(name, label, sec, rollout.SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s")
}

// fail is a failure of reason, classed as ingest classes Flux's.
func fail(name, label string, sec int, reason string) rollout.Observation {
	o := ob(name, label, sec, rollout.SignalFailed, reason, reason+" on "+name)
	o.Class = ingest.FailureClass(reason)
	return o
}

// applied0 is a revision every layer applied before the tests' rollouts:
// it tells an events-only engine which layers exist.
var applied0 = []rollout.Observation{succ("infra", "R0", -600), succ("platform", "R0", -590), succ("apps", "R0", -580)}

type harness struct {
	t      testing.TB
	dir    string
	cfg    rollout.Config
	now    func() time.Time
	engine *engine.Engine
	stop   func()
}

func defaultConfig() rollout.Config {
	return rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour}
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// start runs an engine on a bbolt file in dir until the test ends or stop.
func start(t testing.TB, dir string, cfg rollout.Config, now func() time.Time) *harness {
	t.Helper()
	te := enginetest.Start(t, dir, cfg, now, true)
	return &harness{t: t, dir: dir, cfg: cfg, now: now, engine: te.Engine, stop: te.Stop}
}

func (h *harness) submit(obs ...rollout.Observation) {
	h.t.Helper()
	for _, o := range obs {
		if err := h.engine.Submit(context.Background(), o); err != nil {
			h.t.Fatalf("Submit %+v: %v", o, err)
		}
	}
}

func (h *harness) view(label string) *rollout.View {
	h.t.Helper()
	v, err := h.engine.Lookup(engine.Query{Hash: hashOf(label)})
	if err != nil {
		h.t.Fatalf("Lookup %s: %v", label, err)
	}
	return v
}

func layerState(v *rollout.View, name string) rollout.LayerState {
	for _, l := range v.Layers.All() {
		if l.Name == "flux-system/"+name {
			return l.State
		}
	}
	return "absent"
}

func TestLookup(t *testing.T) {
	h := start(t, t.TempDir(), defaultConfig(), fixedClock(t0))
	if _, err := h.engine.Lookup(engine.Query{Hash: hashOf("never")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("unknown revision: %v, want ErrNotFound", err)
	}
	oci := rollout.Observation{
		Emitter: layer("apps"), Revision: "latest@sha256:" + hashOf("x") + hashOf("y")[:24], Hash: hashOf("x") + hashOf("y")[:24],
		Origin: revOf("git"), OriginHash: hashOf("git"), At: t0, Signal: rollout.SignalProgressing,
	}
	a := succ("apps", "A", 0)
	b := succ("apps", "B", 1)
	other := succ("apps", "A", 2)
	other.Cluster = "staging"
	h.submit(oci, a, b, other)

	v, err := h.engine.Lookup(engine.Query{Hash: hashOf("git")})
	if err != nil || v.Hash != oci.Hash {
		t.Fatalf("lookup by origin revision: %v, %v", v, err)
	}
	v, err = h.engine.Lookup(engine.Query{Hash: hashOf("B")[:7], Prefix: true})
	if err != nil || v.Hash != hashOf("B") {
		t.Fatalf("lookup by prefix: %v, %v", v, err)
	}
	var amb *engine.AmbiguousError
	if _, err := h.engine.Lookup(engine.Query{Hash: hashOf("A")}); !errors.As(err, &amb) || len(amb.Matches) != 2 {
		t.Fatalf("same hash on two clusters: %v, want ambiguous", err)
	}
	v, err = h.engine.Lookup(engine.Query{Cluster: "staging", Hash: hashOf("A")})
	if err != nil || v.Cluster != "staging" {
		t.Fatalf("lookup on one cluster: %v, %v", v, err)
	}
	if got := enginetest.List(t, h.engine, "", 10); len(got) != 4 || got[0].Cluster != "staging" {
		t.Fatalf("List newest first: %d views, first %+v", len(got), got[0])
	}
	if got := enginetest.List(t, h.engine, "default", 1); len(got) != 1 || got[0].Hash != hashOf("B") {
		t.Fatalf("List of one cluster, limited: %+v", got)
	}
}

func TestStatePersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clock := fixedClock(t0.Add(10 * time.Minute))
	h := start(t, dir, defaultConfig(), clock)
	h.submit(applied0...)
	h.submit(succ("infra", "R1", 1), fail("platform", "R1", 5, "HealthCheckFailed"))
	before := h.view("R1")
	h.stop()

	h2 := start(t, dir, defaultConfig(), clock)
	after := h2.view("R1")
	if after.Verdict != rollout.VerdictFailed || len(after.Failures) != 1 || after.Layers.Len() != before.Layers.Len() {
		t.Fatalf("after restart: %+v", after)
	}
	if h2.view("R0").Verdict != rollout.VerdictApplied {
		t.Fatal("R0 lost across restart")
	}
}

func TestGarbageCollection(t *testing.T) {
	dir := t.TempDir()
	cfg := defaultConfig()
	cfg.Retention = 48 * time.Hour
	h := start(t, dir, cfg, fixedClock(t0))
	h.submit(applied0...)
	h.submit(succ("infra", "R1", 10), succ("platform", "R1", 11), succ("apps", "R1", 12))
	h.submit(succ("other", "Q1", 13))
	h.stop()

	// Three days later: R0 is old and replaced everywhere; R1 is old but
	// still what every layer runs; Q1 is the current revision of "other".
	h2 := start(t, dir, cfg, fixedClock(t0.Add(72*time.Hour)))
	if _, err := h2.engine.Lookup(engine.Query{Hash: hashOf("R0")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("R0 not collected: %v", err)
	}
	for _, label := range []string{"R1", "Q1"} {
		if _, err := h2.engine.Lookup(engine.Query{Hash: hashOf(label)}); err != nil {
			t.Fatalf("%s, still current, was collected: %v", label, err)
		}
	}
	h2.stop()
	h3 := start(t, dir, cfg, fixedClock(t0.Add(72*time.Hour)))
	if _, err := h3.engine.Lookup(engine.Query{Hash: hashOf("R0")}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("R0 came back from the store: %v", err)
	}
}

func TestDuplicateChangesNothing(t *testing.T) {
	h := start(t, t.TempDir(), defaultConfig(), fixedClock(t0.Add(time.Minute)))
	o := fail("apps", "R1", 9, "PruneFailed")
	h.submit(o)
	learned := h.engine.Stats().Learned.Load()
	h.submit(o, o, o)
	if got := h.engine.Stats().Learned.Load(); got != learned {
		t.Fatalf("duplicates changed evidence: learned %d, then %d", learned, got)
	}
	if got := h.engine.Stats().Observations.Load(); got != 4 {
		t.Fatalf("observations acknowledged %d, want 4", got)
	}
}

// TestStuckAtDeadline runs the engine's own timer in a synctest bubble: the
// rollout turns stuck when the deadline passes, with no new evidence, and
// a waiter is woken by it.
func TestStuckAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, t.TempDir(), defaultConfig(), time.Now)
		base := time.Now().UTC()
		at := func(o rollout.Observation, sec int) rollout.Observation {
			o.At = base.Add(time.Duration(sec) * time.Second)
			return o
		}
		h.submit(at(succ("infra", "R0", 0), -60), at(succ("apps", "R0", 0), -60))
		h.submit(at(succ("infra", "R1", 0), 1))

		woke := make(chan *rollout.View)
		go func() {
			v, _ := h.engine.Wait(context.Background(), engine.Query{Hash: hashOf("R1")})
			woke <- v
		}()
		time.Sleep(29 * time.Minute)
		synctest.Wait()
		if v := h.view("R1"); v.Verdict != rollout.VerdictApplying {
			t.Fatalf("before the deadline: %s", v.Verdict)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		v := <-woke
		if v.Verdict != rollout.VerdictStuck || v.RootCause != "flux-system/apps" {
			t.Fatalf("after the deadline: %s, root cause %q", v.Verdict, v.RootCause)
		}
		h.stop()
	})
}

// TestSupersededOnceTheWorkingLayerMovesOn: R1 is held from superseded
// while platform still applies it, though the cluster already told every
// layer to apply newer revisions (membership marks are not reports). When
// platform's first report on a newer revision arrives, and nothing about R1
// itself, R1 must be re-evaluated at once: superseded. The newer revision
// may be the next one, or one past revisions platform was only told to
// apply.
func TestSupersededOnceTheWorkingLayerMovesOn(t *testing.T) {
	marks := func(label string, sec int) []rollout.Observation {
		var out []rollout.Observation
		for _, l := range []string{"infra", "platform", "apps"} {
			out = append(out, ob(l, label, sec, rollout.SignalExpected, "", ""))
		}
		return out
	}
	for _, newer := range [][]string{{"R2"}, {"R2", "R3"}} {
		t.Run(strings.Join(newer, ","), func(t *testing.T) {
			h := start(t, t.TempDir(), defaultConfig(), fixedClock(t0.Add(10*time.Minute)))
			if err := h.engine.SubmitAll(context.Background(), marks("R1", 0)); err != nil {
				t.Fatal(err)
			}
			h.submit(succ("infra", "R1", 1), prog("platform", "R1", 5))
			for i, label := range newer {
				if err := h.engine.SubmitAll(context.Background(), marks(label, 10+10*i)); err != nil {
					t.Fatal(err)
				}
				h.submit(succ("infra", label, 11+10*i))
			}
			if v := h.view("R1"); v.Verdict != rollout.VerdictApplying {
				t.Fatalf("R1 is %s while platform still applies it", v.Verdict)
			}
			h.submit(prog("platform", newer[len(newer)-1], 40))
			if v := h.view("R1"); v.Verdict != rollout.VerdictSuperseded {
				t.Fatalf("R1 is %s after platform moved on", v.Verdict)
			}
		})
	}
}

// TestSubmitRefusesInvalid: an observation the model cannot judge is
// refused as invalid (a retry cannot help, unlike a store failure), and a
// batch holding one stores none of it.
func TestSubmitRefusesInvalid(t *testing.T) {
	h := start(t, t.TempDir(), defaultConfig(), time.Now)
	for name, mangle := range map[string]func(*rollout.Observation){
		"no revision": func(o *rollout.Observation) { o.Revision, o.Hash = "", "" },
		"no emitter":  func(o *rollout.Observation) { o.Emitter.Name = "" },
		"no time":     func(o *rollout.Observation) { o.At = time.Time{} },
		"year 1":      func(o *rollout.Observation) { o.At = time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC) },
		"year 2300":   func(o *rollout.Observation) { o.At = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"no signal":   func(o *rollout.Observation) { o.Signal = 0 },
	} {
		bad := succ("apps", "R1", 0)
		mangle(&bad)
		err := h.engine.SubmitAll(context.Background(), []rollout.Observation{succ("infra", "R1", 0), bad})
		if !errors.Is(err, rollout.ErrInvalid) || errors.Is(err, engine.ErrStore) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if n := h.engine.Stats().Observations.Load(); n != 0 || len(enginetest.List(t, h.engine, "", 10)) != 0 {
		t.Fatalf("refused batches stored %d observations", n)
	}
}
