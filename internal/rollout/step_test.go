package rollout

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The model's steps, driven without an engine or a store: what each step
// decides is in the Change it returns.

// memStore keeps what Changes would have stored, for Load.
type memStore struct {
	evidence map[EvidenceKey]*Evidence
	mailed   map[string]bool
	floors   map[FloorKey]Floor
}

func newMemStore() *memStore {
	return &memStore{evidence: map[EvidenceKey]*Evidence{}, mailed: map[string]bool{}, floors: map[FloorKey]Floor{}}
}

func (s *memStore) store(c *Change) {
	maps.Copy(s.evidence, c.Puts)
	for _, k := range c.Deletes {
		delete(s.evidence, k)
	}
	for _, m := range c.Mails {
		s.mailed[m.Key] = true
	}
	maps.Copy(s.floors, c.Floors)
}

func (s *memStore) Load(evidence func(EvidenceKey, *Evidence) error, mailed func(string), floor func(FloorKey, Floor) error) error {
	keys := slices.SortedFunc(maps.Keys(s.evidence), func(a, b EvidenceKey) int { return int(a.Seq) - int(b.Seq) })
	for _, k := range keys {
		if err := evidence(k, s.evidence[k].clone()); err != nil {
			return err
		}
	}
	for k := range s.mailed {
		mailed(k)
	}
	for k, f := range s.floors {
		if err := floor(k, f); err != nil {
			return err
		}
	}
	return nil
}

func stepObs(layer, hash string, sec int, sig Signal) Observation {
	return Observation{
		Cluster: "prod", Emitter: Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: layer},
		Revision: "main@sha1:" + hash, Hash: hash, At: mt0.Add(time.Duration(sec) * time.Second), Signal: sig,
		Reason: sig.String(), Message: sig.String(),
	}
}

// stepResult is what a test compares of a Change: verdicts, mail kinds and
// sizes, in a stable order.
type stepResult struct {
	Puts, Deletes, Settled, Forgot int
	Verdicts                       []string // hash verdict (from: "new" or the old verdict)
	Mails                          []string // kind hash
}

func summarise(c *Change) stepResult {
	s := stepResult{Puts: len(c.Puts), Deletes: len(c.Deletes), Settled: len(c.Settle), Forgot: len(c.Forget)}
	for _, v := range c.Verdicts {
		from := "new"
		if !v.New {
			from = v.From.String()
		}
		s.Verdicts = append(s.Verdicts, v.View.Hash+" "+v.View.Verdict.String()+" from "+from)
	}
	for _, m := range c.Mails {
		s.Mails = append(s.Mails, string(m.Kind)+" "+m.View.Hash)
	}
	slices.Sort(s.Verdicts)
	slices.Sort(s.Mails)
	return s
}

func TestModelSteps(t *testing.T) {
	cfg := Config{
		Layers:     []Emitter{{RoleLayer, "Kustomization", "flux-system", "infra"}, {RoleLayer, "Kustomization", "flux-system", "apps"}},
		StuckAfter: 10 * time.Minute, SettleAfter: time.Minute, MailTo: []string{"ops@x"}, Verify: true,
	}
	type step struct {
		name    string
		at      int // seconds after mt0
		apply   []Observation
		settled []Key // what the archive holds already
		expire  bool
		settle  bool
		reload  bool // load the model from what the steps stored, then compare views
		want    stepResult
		ignored int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"applying, then applied when every expected layer succeeded", []step{
			{name: "progressing", at: 1, apply: []Observation{stepObs("infra", "a1", 1, SignalProgressing)},
				want: stepResult{Puts: 1, Verdicts: []string{"a1 applying from new"}, Mails: []string{"applying a1"}}},
			{name: "one layer succeeded", at: 2, apply: []Observation{stepObs("infra", "a1", 2, SignalSucceeded)},
				want: stepResult{Puts: 1}},
			{name: "a repeat learns nothing", at: 3, apply: []Observation{stepObs("infra", "a1", 2, SignalSucceeded)}},
			{name: "the last layer", at: 4, apply: []Observation{stepObs("apps", "a1", 4, SignalSucceeded)},
				want: stepResult{Puts: 1, Verdicts: []string{"a1 applied from applying"}, Mails: []string{"applied a1"}}},
			{name: "reload decides no mail again", at: 5, reload: true},
		}},
		{"stuck at the deadline, once", []step{
			{name: "progressing", at: 0, apply: []Observation{stepObs("infra", "b1", 0, SignalProgressing)},
				want: stepResult{Puts: 1, Verdicts: []string{"b1 applying from new"}, Mails: []string{"applying b1"}}},
			{name: "before the deadline", at: 599, expire: true},
			{name: "at the deadline", at: 600, expire: true,
				want: stepResult{Verdicts: []string{"b1 stuck from applying"}, Mails: []string{"stuck b1"}}},
			{name: "again", at: 700, expire: true},
			{name: "reload", at: 800, reload: true},
		}},
		{"a settled rollout's evidence is ignored", []step{
			{name: "settled", at: 1, apply: []Observation{stepObs("infra", "c1", 1, SignalFailed)}, settled: []Key{{"prod", "c1"}},
				ignored: 1},
		}},
		{"settled once every emitter moved on and it was quiet", []step{
			{name: "d1 applied", at: 1, apply: []Observation{stepObs("infra", "d1", 1, SignalSucceeded), stepObs("apps", "d1", 1, SignalSucceeded)},
				want: stepResult{Puts: 2, Verdicts: []string{"d1 applied from new"}, Mails: []string{"applied d1", "applying d1"}}},
			{name: "d2 applied", at: 10, apply: []Observation{stepObs("infra", "d2", 10, SignalSucceeded), stepObs("apps", "d2", 10, SignalSucceeded)},
				want: stepResult{Puts: 2, Verdicts: []string{"d2 applied from new"}, Mails: []string{"applied d2", "applying d2"}}},
			{name: "too soon", at: 60, settle: true},
			{name: "quiet for SettleAfter", at: 70, settle: true, want: stepResult{Deletes: 2, Settled: 1, Forgot: 1}},
			{name: "reload keeps d2 and the floor", at: 71, reload: true},
			{name: "late evidence before the floor", at: 72, apply: []Observation{stepObs("infra", "d0", 0, SignalFailed)}, ignored: 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewModel(cfg)
			if err != nil {
				t.Fatal(err)
			}
			st := newMemStore()
			for _, s := range tc.steps {
				now := mt0.Add(time.Duration(s.at) * time.Second)
				c := &Change{}
				ignored := 0
				if s.apply != nil {
					for i := range s.apply {
						if err := m.Normalise(&s.apply[i]); err != nil {
							t.Fatal(err)
						}
					}
					settled := map[Key]bool{}
					for _, k := range s.settled {
						settled[k] = true
					}
					_, ignored = m.Apply(c, [][]Observation{s.apply}, settled, now)
				}
				if s.expire {
					m.Expire(c, now)
				}
				if s.settle {
					m.Settle(c, now, func() bool { return false })
				}
				if s.reload {
					before := m.views()
					lc, err := m.Load(st, now)
					if err != nil {
						t.Fatal(err)
					}
					if got := summarise(lc); len(got.Mails) != 0 {
						t.Errorf("%s: reload made mails due: %v", s.name, got.Mails)
					}
					if after := m.views(); !reflect.DeepEqual(after, before) {
						t.Errorf("%s: reloaded views differ:\n%+v\nwant\n%+v", s.name, after, before)
					}
				} else if got := summarise(c); !reflect.DeepEqual(got, s.want) {
					t.Errorf("%s: change\n%+v\nwant\n%+v", s.name, got, s.want)
				}
				if ignored != s.ignored {
					t.Errorf("%s: ignored %d, want %d", s.name, ignored, s.ignored)
				}
				m.Verify()
				st.store(c)
			}
		})
	}
}

// views are the model's live views by key, with the evaluation time
// dropped: a reload evaluates at its own time.
func (m *Model) views() map[Key]Verdict {
	out := map[Key]Verdict{}
	for _, c := range m.clusters {
		for k, r := range c.rollouts {
			out[Key{c.name, k}] = r.view.Verdict
		}
	}
	return out
}
