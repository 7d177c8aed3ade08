package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// own is s in memory of its own, as a decoded event's strings are.
func own(s string) string { return strings.Clone(s) }

func ownObs(layer, hash string, sec int, sig Signal, reason string) Observation {
	o := stepObs(own(layer), hash, sec, sig)
	o.Emitter.Kind, o.Emitter.Namespace = own(o.Emitter.Kind), own(o.Emitter.Namespace)
	o.Revision, o.Reason, o.Message = own(o.Revision), own(reason), own(o.Message)
	return o
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestEvidenceSharesStrings: evidence from separately decoded events holds
// one copy of each kind, namespace, layer name, reason and revision
// spelling; what it says is unchanged.
func TestEvidenceSharesStrings(t *testing.T) {
	m, err := NewModel(Config{StuckAfter: time.Hour, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(obs ...Observation) {
		t.Helper()
		for i := range obs {
			if err := m.Normalise(&obs[i]); err != nil {
				t.Fatal(err)
			}
		}
		m.Apply(&Change{}, [][]Observation{obs}, nil, mt0.Add(time.Hour))
	}
	apply(ownObs("infra", "a1", 1, SignalProgressing, "Progressing"), ownObs("apps", "a1", 2, SignalProgressing, "Progressing"))
	apply(ownObs("infra", "a1", 3, SignalSucceeded, "ReconciliationSucceeded"), ownObs("apps", "a1", 4, SignalSucceeded, "ReconciliationSucceeded"))
	apply(ownObs("infra", "b2", 5, SignalSucceeded, "ReconciliationSucceeded"))

	c := m.clusters["prod"]
	a1, b2 := c.rollouts["a1"], c.rollouts["b2"]
	var infra, apps Emitter
	for e := range a1.ev {
		switch e.Name {
		case "infra":
			infra = e
		case "apps":
			apps = e
		}
	}
	var infraB Emitter
	for e := range b2.ev {
		infraB = e
	}
	ia, aa, ib := a1.ev[infra], a1.ev[apps], b2.ev[infraB]
	for _, tc := range []struct {
		what string
		a, b string
	}{
		{"kind across layers", infra.Kind, apps.Kind},
		{"namespace across layers", infra.Namespace, apps.Namespace},
		{"layer name across rollouts", infra.Name, infraB.Name},
		{"layer name with its log", infra.Name, c.logs[infra].emitter.Name},
		{"revision across layers", ia.Revision, aa.Revision},
		{"progress reason across layers", ia.Progress.Reason, aa.Progress.Reason},
		{"success reason across rollouts", ia.Succeeded.Reason, ib.Succeeded.Reason},
	} {
		if tc.a != tc.b {
			t.Fatalf("%s: %q and %q", tc.what, tc.a, tc.b)
		}
		if !same(tc.a, tc.b) {
			t.Errorf("%s: two copies of %q", tc.what, tc.a)
		}
	}
	if ia.Revision != "main@sha1:a1" || ia.Succeeded.Reason != "ReconciliationSucceeded" || ia.Progress.Reason != "Progressing" {
		t.Errorf("evidence changed: %+v", ia)
	}
}

// TestWordsBounded: reasons come from the wire; the cluster shares at most
// maxWords of them and keeps the rest as they came.
func TestWordsBounded(t *testing.T) {
	c := newCluster("prod")
	for i := range 2 * maxWords {
		w := own(fmt.Sprintf("Reason%d", i))
		got := c.word(w)
		if got != w {
			t.Fatalf("word(%q) = %q", w, got)
		}
		if again := c.word(own(w)); (i < maxWords) != same(again, got) {
			t.Fatalf("word %d (%d shared at most): shared %v", i, maxWords, same(again, got))
		}
	}
	if len(c.words) != maxWords {
		t.Fatalf("%d words, want %d", len(c.words), maxWords)
	}
}
