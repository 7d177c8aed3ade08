package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Verdict is the one answer per rollout (design.md, "Verdict").
type Verdict uint8

const (
	VerdictUnknown Verdict = iota
	VerdictApplying
	VerdictApplied
	VerdictFailed
	VerdictSuperseded
	VerdictStuck
)

var verdictNames = [...]string{"unknown", "applying", "applied", "failed", "superseded", "stuck"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "invalid"
}

// MarshalText persists and serves the name, never the number.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText parses a verdict name.
func (v *Verdict) UnmarshalText(b []byte) error {
	i := slices.Index(verdictNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("unknown verdict %q", b)
	}
	*v = Verdict(i)
	return nil
}

// Terminal reports whether a pipeline can stop waiting.
func (v Verdict) Terminal() bool {
	return v == VerdictApplied || v == VerdictFailed || v == VerdictSuperseded || v == VerdictStuck
}

// LayerState is one layer's progress on one rollout.
type LayerState string

const (
	LayerPending     LayerState = "pending"     // expected, nothing reported for this revision
	LayerWaiting     LayerState = "waiting"     // blocked behind a dependency
	LayerProgressing LayerState = "progressing" // applying, checking health
	LayerCanceled    LayerState = "canceled"    // left for a newer revision
	LayerApplied     LayerState = "applied"
	LayerFailed      LayerState = "failed"
	LayerRecovered   LayerState = "recovered" // failed, then succeeded on the same revision
)

// View is the published state of one rollout; it is never mutated once
// published.
type View struct {
	Cluster      string        `json:"cluster"`
	Revision     string        `json:"revision"`
	Hash         string        `json:"hash"`
	Origin       string        `json:"origin_revision,omitempty"`
	OriginHash   string        `json:"-"`
	Verdict      Verdict       `json:"verdict"`
	Terminal     bool          `json:"terminal"`
	Summary      string        `json:"summary"`
	Subject      string        `json:"subject,omitempty"`
	Source       string        `json:"source,omitempty"`
	ExpectedFrom string        `json:"expected_from"`
	FirstSeen    time.Time     `json:"first_seen"`
	LastSeen     time.Time     `json:"last_seen"`
	Deadline     time.Time     `json:"deadline"`
	CompletedAt  *time.Time    `json:"completed_at"`
	Late         bool          `json:"late,omitempty"` // applied after the deadline: it was stuck
	SupersededBy *string       `json:"superseded_by"`
	SupersedeKey *Key          `json:"-"`
	Behind       []string      `json:"behind,omitempty"`
	RootCause    string        `json:"root_cause,omitempty"`
	Layers       []LayerView   `json:"layers"`
	Failures     []FailureView `json:"failures"`

	routes map[string][]string // emitter (layer name, or kind/ns/name of a source) to routed recipients
}

// LayerView is one expected layer of a rollout.
type LayerView struct {
	Name     string     `json:"name"`
	State    LayerState `json:"state"`
	Revision string     `json:"revision"` // this rollout's, or when pending the replaced one it was at
	Reason   string     `json:"reason"`
	Message  string     `json:"message"`
	At       *time.Time `json:"at"`
}

// FailureView is one failure of one layer.
type FailureView struct {
	Layer        string    `json:"layer"`
	Reason       string    `json:"reason"`
	Message      string    `json:"message"`
	Objects      []Object  `json:"objects"`
	At           time.Time `json:"at"`
	LastAt       time.Time `json:"last_at"`
	AfterApplied bool      `json:"after_applied,omitempty"` // a later degradation, not the deploy's failure
}

// Where a rollout's expected layers came from.
const (
	ExpectedFromEvents  = "events"
	ExpectedFromConfig  = "config"
	ExpectedFromCluster = "cluster"
)

// expected returns the layers a rollout must reach, sorted, the revisions
// it replaced, and the revision each silent layer was at. Without cluster
// access the layers are: the configured ones, every layer that reported the
// revision, and every layer that carried a revision it replaced (the one
// each of its emitters reported just before it), because a layer that was
// at the old revision must move.
func (c *cluster) expected(r *rolloutState, cfg *Config) ([]Emitter, map[string]bool, map[Emitter]string) {
	set := make(map[Emitter]bool, len(cfg.Layers)+len(r.ev))
	if r.clusterKnown() {
		// The cluster said, while this revision was current, which layers
		// must apply it: exactly those (and the configured ones). A layer
		// suspended since, or on another source, is not expected.
		for _, l := range cfg.Layers {
			set[l] = true
		}
		preds := map[string]bool{}
		for e, ev := range r.ev {
			if e.IsLayer() && ev.Member != nil && ev.Member.Signal == SignalExpected {
				set[e] = true
			}
			if p := c.logs[e].before(r.position(e)); p != "" {
				preds[p] = true
			}
		}
		return sortedEmitters(set), preds, nil
	}
	for _, l := range cfg.Layers {
		set[l] = true
	}
	preds := map[string]bool{}
	for e := range r.ev {
		if e.IsLayer() {
			set[e] = true
		}
		if p := c.logs[e].before(r.position(e)); p != "" {
			preds[p] = true
		}
	}
	// Of two replaced revisions a silent layer carried, it was at the later.
	wasAt := map[Emitter]logEntry{}
	for p := range preds {
		for e, ev := range c.rollouts[p].ev {
			if !e.IsLayer() {
				continue
			}
			set[e] = true
			if x := (logEntry{ev.First, p}); r.ev[e] == nil {
				if cur, ok := wasAt[e]; !ok || cur.compare(x) < 0 {
					wasAt[e] = x
				}
			}
		}
	}
	was := make(map[Emitter]string, len(wasAt))
	for e, x := range wasAt {
		was[e] = c.rollouts[x.hash].ev[e].Revision
	}
	return sortedEmitters(set), preds, was
}

// clusterKnown reports whether cluster state told which layers this
// rollout's revision was for.
func (r *rolloutState) clusterKnown() bool {
	for e, ev := range r.ev {
		if e.IsLayer() && ev.Member != nil {
			return true
		}
	}
	return false
}

func sortedEmitters(set map[Emitter]bool) []Emitter {
	out := make([]Emitter, 0, len(set))
	for e := range set {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Emitter) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	return out
}

// evaluate derives a rollout's view from the evidence and the clock alone
// (design.md, "Time and precedence"). It is pure: the same evidence and now
// give the same view whatever order the evidence arrived in.
func (c *cluster) evaluate(r *rolloutState, cfg *Config, now time.Time) *View {
	v := &View{
		Cluster:      r.key.Cluster,
		Hash:         r.key.Hash,
		FirstSeen:    r.first,
		LastSeen:     r.last,
		Deadline:     r.first.Add(cfg.StuckAfter),
		ExpectedFrom: ExpectedFromEvents,
		Layers:       []LayerView{},
		Failures:     []FailureView{},
	}
	switch {
	case r.clusterKnown():
		v.ExpectedFrom = ExpectedFromCluster
	case len(cfg.Layers) > 0:
		v.ExpectedFrom = ExpectedFromConfig
	}
	v.Revision = r.displayRevision()
	for e, ev := range r.ev {
		if len(ev.MailTo) > 0 {
			if v.routes == nil {
				v.routes = map[string][]string{}
			}
			name := e.Layer()
			if !e.IsLayer() {
				name = e.String()
			}
			v.routes[name] = ev.MailTo
		}
		if ev.OriginHash != "" && (v.OriginHash == "" || ev.OriginHash < v.OriginHash) {
			v.Origin, v.OriginHash = ev.Origin, ev.OriginHash
		}
		if !e.IsLayer() {
			if v.Source == "" || e.String() < v.Source {
				v.Source = e.String()
			}
			if ev.Subject != "" && (v.Subject == "" || ev.Subject < v.Subject) {
				v.Subject = ev.Subject
			}
		}
	}

	expected, preds, was := c.expected(r, cfg)
	var (
		completed    = len(expected) > 0
		completedAt  time.Time
		firstFailure time.Time
		supAt        time.Time
		supHash      string
		working      bool // a layer is still applying this revision
		behind       []LayerView
	)
	for _, l := range expected {
		ev := r.ev[l]
		lv := layerView(l, ev, was[l])
		v.Layers = append(v.Layers, lv)
		if ev == nil || ev.Succeeded == nil {
			completed = false
			behind = append(behind, lv)
		} else if ev.Succeeded.At.After(completedAt) {
			completedAt = ev.Succeeded.At
		}
		if ev != nil {
			for _, f := range ev.Failures {
				if firstFailure.IsZero() || f.First.Before(firstFailure) {
					firstFailure = f.First
				}
			}
		}
		// Supersession: the next revision this layer reported after this one,
		// if it is newer everywhere and not one this rollout replaced.
		if lv.State == LayerProgressing && !c.movedOn(l, r) {
			working = true
		}
		s, ok := c.logs[l].after(r.position(l))
		if !ok || preds[s.hash] {
			continue
		}
		sr := c.rollouts[s.hash]
		if sr == nil || !(sr.first.After(r.first) || sr.first.Equal(r.first) && s.hash > r.key.Hash) {
			continue
		}
		if supHash == "" || s.first.Before(supAt) || s.first.Equal(supAt) && s.hash < supHash {
			supAt, supHash = s.first, s.hash
		}
	}

	for _, l := range expected {
		if ev := r.ev[l]; ev != nil {
			for _, f := range ev.Failures {
				v.Failures = append(v.Failures, FailureView{
					Layer: l.Layer(), Reason: f.Reason, Message: f.Message,
					Objects: nonNil(f.Objects), At: f.First, LastAt: f.Last,
					AfterApplied: completed && f.First.After(completedAt),
				})
			}
		}
	}
	slices.SortStableFunc(v.Failures, func(a, b FailureView) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Layer, b.Layer)
	})

	if completed && !supAt.Before(completedAt) {
		supHash = "" // replaced after it completed: the normal course of things
	}
	if working {
		// A layer that has not moved on is still applying this revision
		// (checking its health, say): its own outcome comes first. Flux
		// finishes that work unless told to cancel it, so declaring the
		// revision superseded now would turn into "failed" later, and a
		// verdict a pipeline stopped on must not change.
		supHash = ""
	}
	if supHash != "" {
		sv := c.rollouts[supHash]
		rev := sv.displayRevision()
		v.SupersededBy, v.SupersedeKey = &rev, &sv.key
	}

	// A failure stamped in the same second as the completing success sorts
	// before it; evidence stamped after the deadline cannot undo "stuck",
	// except the full completion that turns it into a late "applied".
	failedBy := func(t time.Time) bool { return !firstFailure.IsZero() && !firstFailure.After(t) }
	switch {
	case completed && failedBy(completedAt):
		v.Verdict = VerdictFailed
	case completed:
		v.Verdict = VerdictApplied
		v.CompletedAt = &completedAt
		v.Late = completedAt.After(v.Deadline)
	case failedBy(v.Deadline):
		v.Verdict = VerdictFailed
	case supHash != "" && !supAt.After(v.Deadline):
		v.Verdict = VerdictSuperseded
	case !now.Before(v.Deadline):
		v.Verdict = VerdictStuck
	default:
		v.Verdict = VerdictApplying
	}
	if completed && v.Verdict == VerdictFailed {
		v.CompletedAt = &completedAt
	}
	if !completed {
		for _, b := range behind {
			v.Behind = append(v.Behind, b.Name)
		}
	}
	if v.Verdict == VerdictStuck || v.Verdict == VerdictApplying {
		v.RootCause = rootCause(behind, dependsOn(r))
	}
	v.Terminal = v.Verdict.Terminal()
	v.Summary = summary(v, len(expected), len(behind))
	return v
}

// layerView shows one layer's progress; a layer that has not reported the
// revision shows the replaced revision it was at, when known.
func layerView(l Emitter, ev *Evidence, was string) LayerView {
	lv := LayerView{Name: l.Layer(), State: LayerPending}
	if ev == nil {
		lv.Revision = was
		return lv
	}
	lv.Revision = ev.Revision
	var m *Mark
	switch {
	case len(ev.Failures) > 0:
		last := ev.Failures[0]
		for _, f := range ev.Failures[1:] {
			if f.Last.After(last.Last) {
				last = f
			}
		}
		m = &Mark{At: last.Last, Reason: last.Reason, Message: last.Message}
		lv.State = LayerFailed
		if ev.Succeeded != nil && !ev.LastSucceeded.Before(last.Last) {
			lv.State = LayerRecovered
			m = &Mark{At: ev.LastSucceeded, Reason: ev.Succeeded.Reason, Message: ev.Succeeded.Message}
		}
	case ev.Succeeded != nil:
		lv.State, m = LayerApplied, ev.Succeeded
	case ev.Progress == nil:
		// Only the cluster's membership mark: the layer reported nothing.
		lv.Revision = ""
		return lv
	default:
		m = ev.Progress
		switch m.Signal {
		case SignalWaiting:
			lv.State = LayerWaiting
		case SignalCanceled:
			lv.State = LayerCanceled
		default:
			lv.State = LayerProgressing
		}
	}
	if m != nil {
		at := m.At
		lv.Reason, lv.Message, lv.At = m.Reason, m.Message, &at
	}
	return lv
}

// rootCause picks, among the layers behind, the one holding the others
// back. With dependsOn from the cluster, it walks up the chain: a layer
// behind whose dependencies are all through is a root. Among roots (or
// without dependsOn), a failed or progressing layer comes before a silent
// one, and a silent one before one that only waits on a dependency.
func rootCause(behind []LayerView, deps map[string][]string) string {
	weight := func(s LayerState) int {
		switch s {
		case LayerFailed:
			return 0
		case LayerProgressing, LayerCanceled:
			return 1
		case LayerPending:
			return 2
		}
		return 3
	}
	isBehind := map[string]bool{}
	for _, b := range behind {
		isBehind[b.Name] = true
	}
	blocked := func(name string) bool {
		for _, d := range deps[name] {
			if isBehind[d] {
				return true
			}
		}
		return false
	}
	best := -1
	for i, b := range behind {
		if blocked(b.Name) {
			continue
		}
		if best < 0 || weight(b.State) < weight(behind[best].State) {
			best = i
		}
	}
	if best < 0 && len(behind) > 0 {
		best = 0 // a dependency cycle: every layer waits on another
	}
	if best < 0 {
		return ""
	}
	return behind[best].Name
}

// dependsOn is what the cluster said each layer depends on.
func dependsOn(r *rolloutState) map[string][]string {
	var deps map[string][]string
	for e, ev := range r.ev {
		if e.IsLayer() && ev.Member != nil && len(ev.Member.DependsOn) > 0 {
			if deps == nil {
				deps = map[string][]string{}
			}
			deps[e.Layer()] = ev.Member.DependsOn
		}
	}
	return deps
}

func summary(v *View, expected, behind int) string {
	switch v.Verdict {
	case VerdictApplied:
		s := fmt.Sprintf("all %d expected layers applied it", expected)
		if v.Late {
			s += ", after the deadline"
		}
		return s
	case VerdictFailed:
		for _, f := range v.Failures {
			if !f.AfterApplied {
				return fmt.Sprintf("%s failed: %s", f.Layer, f.Reason)
			}
		}
	case VerdictSuperseded:
		return "superseded by " + *v.SupersededBy + " before every layer applied it"
	case VerdictStuck:
		if expected == 0 {
			return "no layer reported it by the deadline"
		}
		return fmt.Sprintf("%d of %d expected layers not applied by the deadline; root cause %s", behind, expected, v.RootCause)
	case VerdictApplying:
		if expected == 0 {
			return "no layer has reported it yet"
		}
		return fmt.Sprintf("%d of %d expected layers applied it", expected-behind, expected)
	}
	return ""
}

func (r *rolloutState) displayRevision() string {
	rev := ""
	for _, ev := range r.ev {
		if rev == "" || betterRevision(ev.Revision, rev) {
			rev = ev.Revision
		}
	}
	return rev
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
