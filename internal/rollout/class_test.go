package rollout

import (
	"testing"
	"time"
)

// TestLoadClassesStoredFailures: evidence stored before failures had
// classes is classed at Load by Config.ClassOf, so that a prune failure
// whose mails went out before an upgrade is not mailed again as a plain
// failure after it.
func TestLoadClassesStoredFailures(t *testing.T) {
	layer := Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"}
	at := mt0.Add(time.Minute)
	for _, tt := range []struct {
		name      string
		classOf   func(string) FailureClass
		wantClass FailureClass
		wantMails int
	}{
		{"classed", func(r string) FailureClass { return map[string]FailureClass{"PruneFailed": FailurePrune}[r] }, FailurePrune, 0},
		{"unclassed", nil, FailureOther, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newMemStore()
			ek := EvidenceKey{Key: Key{"prod", "abc"}, Seq: 1, Emitter: layer}
			st.evidence[ek] = &Evidence{Revision: "main@sha1:abc", First: at, Last: at,
				Failures: []Failure{{Reason: "PruneFailed", Message: "delete failed", First: at, Last: at,
					Objects: []Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old", At: at}}}}}
			m, err := NewModel(Config{StuckAfter: time.Hour, MailTo: []string{"ops@x"}, ClassOf: tt.classOf})
			if err != nil {
				t.Fatal(err)
			}
			// What the release before mailed for it: applying, and the
			// prune failure of the object.
			k := Key{"prod", "abc"}
			st.mailed[MailKey{Rollout: k, Kind: MailApplying, To: "ops@x"}.String()] = true
			st.mailed[MailKey{Rollout: k, Kind: MailPruneFailed, About: []string{"flux-system/apps", "ConfigMap/apps/old"}, To: "ops@x"}.String()] = true
			c, err := m.Load(st, at)
			if err != nil {
				t.Fatal(err)
			}
			var v *View
			for _, x := range c.Views {
				if x.Key() == k {
					v = x
				}
			}
			if v == nil || len(v.Failures) != 1 || v.Failures[0].Class != tt.wantClass {
				t.Fatalf("view %+v, want one failure of class %q", v, tt.wantClass)
			}
			// The next change of the rollout decides its mails again.
			next := &Change{}
			o := Observation{Cluster: "prod", Emitter: Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "web"},
				Revision: "main@sha1:abc", Hash: "abc", At: at.Add(time.Second), Signal: SignalProgressing, Reason: "Progressing"}
			m.Apply(next, [][]Observation{{o}}, nil, at.Add(time.Second))
			if len(c.Mails)+len(next.Mails) != tt.wantMails {
				t.Errorf("mails due: %+v then %+v, want %d", c.Mails, next.Mails, tt.wantMails)
			}
		})
	}
}

// TestLoadRefusesEmittersWithoutRole: a stored emitter with no role that
// Config.RoleOf can give, or an unknown one, fails the load: a layer taken
// for no layer would drop out of what rollouts expect.
func TestLoadRefusesEmittersWithoutRole(t *testing.T) {
	at := mt0.Add(time.Minute)
	for _, tt := range []struct {
		name    string
		role    Role
		roleOf  func(string) Role
		wantErr bool
	}{
		{"a layer", RoleLayer, nil, false},
		{"no role, none given", 0, nil, true},
		{"no role, given from the kind", 0, func(string) Role { return RoleLayer }, false},
		{"an unknown role", 7, nil, true},
	} {
		st := newMemStore()
		em := Emitter{Role: tt.role, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"}
		st.evidence[EvidenceKey{Key: Key{"prod", "abc"}, Seq: 1, Emitter: em}] = &Evidence{Revision: "main@sha1:abc", First: at, Last: at,
			Succeeded: &Mark{At: at, Signal: SignalSucceeded}}
		m, err := NewModel(Config{StuckAfter: time.Hour, RoleOf: tt.roleOf})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Load(st, at); (err != nil) != tt.wantErr {
			t.Errorf("%s: load error %v, want one: %v", tt.name, err, tt.wantErr)
		}
	}
}
