package rollout

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The pure model, tested without an engine or a store.

var mt0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func obsAt(sec int, sig Signal, reason, msg string) Observation {
	return Observation{
		Cluster: "prod", Emitter: Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"},
		Revision: "main@sha1:abc", Hash: "abc", At: mt0.Add(time.Duration(sec) * time.Second),
		Signal: sig, Reason: reason, Message: msg,
	}
}

// TestMergeIsAFold: merging a set of observations in any order, with
// repeats, gives the same Evidence; and a repeat learns nothing.
func TestMergeIsAFold(t *testing.T) {
	prune := obsAt(20, SignalFailed, "PruneFailed", "delete failed")
	prune.Class = FailurePrune
	prune.Objects = []Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old", Error: "forbidden"}}
	later := prune
	later.At = mt0.Add(300 * time.Second)
	later.Objects = []Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old", Error: "still forbidden"}}
	origin := obsAt(1, SignalProgressing, "Progressing", "Deployment/apps/web configured")
	origin.Origin, origin.OriginHash, origin.Subject = "v1@sha1:def", "def", "Add web"
	// The same hash under another ref: the smaller spelling is kept,
	// whichever came first.
	legacy := obsAt(2, SignalWaiting, "DependencyNotReady", "retrying")
	legacy.Revision = "refs/heads/main@sha1:abc"
	mailTo := obsAt(3, SignalProgressing, "Progressing", "Health check passed")
	mailTo.MailTo = []string{"b@x", "a@x"}
	mailTo.Healthy = true
	member := obsAt(0, SignalExpected, "", "")
	member.DependsOn = []string{"flux-system/platform", "flux-system/infra"}
	all := []Observation{
		origin, legacy, mailTo, member, prune, later,
		obsAt(30, SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished"),
		obsAt(330, SignalSucceeded, "ReconciliationSucceeded", "Reconciliation finished"),
		obsAt(30, SignalFailed, "HealthCheckFailed", "timeout"), // same second as the success
	}
	want := &Evidence{}
	for _, o := range all {
		want.merge(o)
	}
	if want.Revision != "main@sha1:abc" || want.OriginHash != "def" || want.Subject != "Add web" ||
		!slices.Equal(want.MailTo, []string{"a@x", "b@x"}) || want.Succeeded.At != mt0.Add(30*time.Second) ||
		want.LastSucceeded != mt0.Add(330*time.Second) || len(want.Failures) != 2 ||
		want.Failures[1].Objects[0].Error != "forbidden" || want.Failures[1].Last != mt0.Add(300*time.Second) ||
		!slices.Equal(want.Member.DependsOn, []string{"flux-system/infra", "flux-system/platform"}) ||
		want.HealthPassed != mt0.Add(3*time.Second) {
		t.Fatalf("fold of every observation: %+v", want)
	}
	expectFold(t, all, want, 1)
}

// expectFold checks that all, merged in 200 random orders with random
// repeats, folds to want each time, and that a repeat learns nothing.
func expectFold(t *testing.T, all []Observation, want *Evidence, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range 200 {
		order := slices.Clone(all)
		for _, o := range all {
			if r.IntN(2) == 0 {
				order = append(order, o)
			}
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		got := &Evidence{}
		for _, o := range order {
			got.merge(o)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %d folds to\n%+v %+v\nwant\n%+v %+v", i, got, got.Inside, want, want.Inside)
		}
		for _, o := range all {
			if got.merge(o) {
				t.Fatalf("merging %+v again learned something", o)
			}
		}
	}
}

// TestDueMails: which mails a view makes due, to whom, one per condition.
func TestDueMails(t *testing.T) {
	view := func(v Verdict, failures ...FailureView) *View {
		return &View{Cluster: "prod", Hash: "abc", Verdict: v, Failures: failures}
	}
	prune := FailureView{Layer: "flux-system/apps", Class: FailurePrune, Reason: "PruneFailed", Objects: []Object{
		{Kind: "ConfigMap", Namespace: "apps", Name: "a"}, {Kind: "Secret", Namespace: "apps", Name: "b"}}}
	health := FailureView{Layer: "flux-system/platform", Class: FailureHealth, Reason: "HealthCheckFailed"}
	var routes routing
	routes.add(Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"}, []string{"apps@x"})
	for _, c := range []struct {
		name   string
		v      *View
		to     []string
		routes routing
		want   []string
	}{
		{"nobody to tell", view(VerdictApplied), nil, routing{}, nil},
		{"applying", view(VerdictApplying), []string{"ops@x"}, routing{}, []string{"applying ops@x"}},
		{"applied", view(VerdictApplied), []string{"ops@x"}, routing{}, []string{"applied ops@x", "applying ops@x"}},
		{"stuck", view(VerdictStuck), []string{"ops@x"}, routing{}, []string{"applying ops@x", "stuck ops@x"}},
		{"superseded mails nothing more", view(VerdictSuperseded), []string{"ops@x"}, routing{}, []string{"applying ops@x"}},
		{"a prune failure per object", view(VerdictFailed, prune), []string{"ops@x"}, routing{}, []string{
			"applying ops@x", "prune-failed flux-system/apps ConfigMap/apps/a ops@x", "prune-failed flux-system/apps Secret/apps/b ops@x"}},
		{"another failure per reason", view(VerdictFailed, health), []string{"ops@x"}, routing{}, []string{
			"applying ops@x", "failed flux-system/platform HealthCheckFailed ops@x"}},
		{"routed to the layer's recipients too", view(VerdictFailed, prune, health), []string{"ops@x"}, routes, []string{
			"applying apps@x", "applying ops@x",
			"failed flux-system/platform HealthCheckFailed ops@x",
			"prune-failed flux-system/apps ConfigMap/apps/a apps@x", "prune-failed flux-system/apps ConfigMap/apps/a ops@x",
			"prune-failed flux-system/apps Secret/apps/b apps@x", "prune-failed flux-system/apps Secret/apps/b ops@x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			keys := map[string]bool{}
			for _, m := range dueMails(c.v, c.to, c.routes) {
				line := string(m.Kind)
				if m.Layer != "" {
					line += " " + m.Layer
				}
				if m.Object != nil {
					line += " " + m.Object.Kind + "/" + m.Object.Namespace + "/" + m.Object.Name
				}
				if m.Reason != "" {
					line += " " + m.Reason
				}
				got = append(got, line+" "+m.To)
				if keys[m.Key] {
					t.Errorf("key %q twice", m.Key)
				}
				keys[m.Key] = true
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Fatalf("due mails\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestRemedyIsAFold: what helm-controller did after a failure folds to one
// story in any order, with repeats, also past the steps kept (unlimited
// retries); a pending mark never follows a report of an action; and the
// story is told in Flux's order.
func TestRemedyIsAFold(t *testing.T) {
	rel := func(sec int, sig Signal, reason, msg string, rm *Remedy) Observation {
		o := obsAt(sec, sig, reason, msg)
		o.Emitter, o.Revision, o.Hash, o.Remedy = Emitter{Role: RoleRelease, Kind: "HelmRelease", Namespace: "apps", Name: "web"}, "", "", rm
		return o
	}
	step := func(sec, version int) *Remedy {
		return &Remedy{Steps: []Step{{Kind: StepRolledBack, Version: version, Reason: "RollbackSucceeded", At: mt0.Add(time.Duration(sec) * time.Second)}}}
	}
	all := []Observation{
		rel(9, SignalPending, "Progressing", "helm-controller has not acted on this spec yet", nil),
		rel(9, SignalFailed, "UpgradeFailed", "Helm upgrade failed", &Remedy{Attempts: 1}),
	}
	// Ten retries, each rolled back (v1, v3, ..., v19), all in one second
	// and again in the next.
	for i := range 10 {
		all = append(all, rel(9+i%2, SignalProgressing, "RollbackSucceeded", "Helm rollback", step(9+i%2, 2*i+1)))
	}
	all = append(all,
		rel(10, SignalFailed, "UpgradeFailed", "Helm upgrade failed", &Remedy{Attempts: 10, Remedied: 10, Steps: step(10, 19).Steps,
			Stalled: &Mark{At: mt0.Add(10 * time.Second), Signal: SignalFailed, Reason: "RetriesExceeded", Message: "Failed to upgrade after 10 attempt(s)"}}))
	want := &Evidence{}
	for _, o := range all {
		want.merge(o)
	}
	rm := want.Inside.Remedy
	if len(rm.Steps) != maxSteps || !rm.Earlier || rm.Steps[0].Version != 9 || rm.Steps[maxSteps-1].Version != 19 || rm.Attempts != 10 || rm.Stalled == nil ||
		want.Progress.Signal == SignalPending {
		t.Fatalf("fold of every observation: %+v, remedy %+v", want, rm)
	}
	story := rm.Story(time.Time{})
	if !strings.HasPrefix(story, "…; retried: failed again; rolled back to v9: ") ||
		!strings.HasSuffix(story, "; rolled back to v19: the cluster runs the previous release; stalled (Failed to upgrade after 10 attempt(s)): a new commit is needed") {
		t.Fatalf("story %q", story)
	}
	expectFold(t, all, want, 3)
}
