package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Verdict is the one answer per rollout (README, "Verdicts").
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

// Verdicts are the verdicts a rollout can have, in their order: every one
// but unknown, which is the answer for a revision without a rollout.
func Verdicts() []Verdict {
	return []Verdict{VerdictApplying, VerdictApplied, VerdictFailed, VerdictSuperseded, VerdictStuck}
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
	Cluster    string `json:"cluster"`
	Revision   string `json:"revision"`
	Hash       string `json:"hash"`
	Origin     string `json:"origin_revision,omitempty"`
	OriginHash string `json:"origin_hash,omitempty"` // the commit an artifact was built from
	// Commit is the git commit the rollout deployed (Config.CommitOf), ""
	// when its revision names none (an artifact's digest).
	Commit       string        `json:"commit,omitempty"`
	Verdict      Verdict       `json:"verdict"`
	Terminal     bool          `json:"terminal"`
	Summary      string        `json:"summary"`
	Subject      string        `json:"subject,omitempty"`
	Source       Ref           `json:"source,omitzero"`
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
	Layers       Layers        `json:"layers"`
	Failures     []FailureView `json:"failures"`
}

// Key names the rollout v is the view of.
func (v *View) Key() Key { return Key{v.Cluster, v.Hash} }

// CommitHash is the hash people know the rollout by: the commit its
// artifact was built from when it names one (an OCI artifact's origin
// revision), else its own.
func (v *View) CommitHash() string {
	if v.OriginHash != "" {
		return v.OriginHash
	}
	return v.Hash
}

// Named is the rollout's revision as people read it: an artifact built
// from a commit is named by the commit, with the artifact beside it.
func (v *View) Named() string {
	if v.Origin != "" {
		return v.Origin + " (artifact " + v.Revision + ")"
	}
	return v.Revision
}

// LayerView is one expected layer of a rollout.
type LayerView struct {
	Name     string     `json:"name"`
	State    LayerState `json:"state"`
	Revision string     `json:"revision"` // this rollout's, or when pending the replaced one it was at
	Reason   string     `json:"reason"`
	Message  string     `json:"message"`
	At       *time.Time `json:"at"`                   // of the state shown
	Since    *time.Time `json:"since,omitempty"`      // the layer's first evidence of the revision
	Healthy  *time.Time `json:"healthy_at,omitempty"` // when its health checks passed
	// DependsOn are the layers it depends on (namespace/name), when the
	// cluster told them.
	DependsOn []string `json:"depends_on,omitempty"`
	// Releases are the releases its apply of the revision changed.
	Releases []ReleaseView `json:"releases,omitempty"`
}

// FailureView is one failure of one layer.
type FailureView struct {
	Layer   string       `json:"layer"`
	Class   FailureClass `json:"class,omitempty"`
	Reason  string       `json:"reason"`
	Message string       `json:"message"`
	Objects []Object     `json:"objects"`
	// Release is the release whose failure it is, on the layer whose
	// apply changed it (zero: the layer's own failure); Remediation what helm-controller
	// did after the failure, in order (Remedy.Story), and Stalled whether
	// it stopped trying: a new commit is needed.
	Release      Ref       `json:"release,omitzero"`
	Remediation  string    `json:"remediation,omitempty"`
	Stalled      bool      `json:"stalled,omitempty"`
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

// expected returns the layers a rollout must reach, sorted, what each
// was at when silent on it (wasAt; "" when it reported the rollout, or
// the cluster said which layers it is for), and the revisions it
// replaced. Without cluster access the layers are: the configured ones,
// every layer that reported the revision, every layer that carried a
// revision it replaced (the one each of its emitters reported just before
// it), and every layer of its family (family.go) whose last report before
// it is of an older revision: a layer that was at an older revision must
// move, however many commits it missed and whichever of them its events
// told. A layer at a revision the sources' events say is of another
// source is not expected (it moved to that one).
func (c *cluster) expected(r *rolloutState, cfg *Config) (layers []Emitter, was []string, preds predSet) {
	preds = predSet{}
	if r.known {
		// The cluster said, while this revision was current, which layers
		// must apply it: exactly those (and the configured ones). A layer
		// suspended since, or on another source, is not expected.
		set := make(map[Emitter]bool, len(cfg.Layers)+len(r.ev))
		for _, l := range cfg.Layers {
			set[l] = true
		}
		for e, ev := range r.ev {
			if e.IsLayer() && ev.expectedByCluster() {
				set[e] = true
			}
			if p := c.predecessor(r, e); p != "" {
				preds[p]++
			}
		}
		layers = sortedEmitters(set)
		return layers, make([]string, len(layers)), preds
	}
	var extra []Emitter // layers outside the family: configured, or not joined
	for e := range r.ev {
		if _, ok := r.fam.layers[e]; !ok && e.IsLayer() {
			extra = append(extra, e)
		}
		if p := c.predecessor(r, e); p != "" {
			preds[p]++
		}
	}
	for _, l := range cfg.Layers {
		if _, ok := r.fam.layers[l]; !ok {
			extra = append(extra, l)
		}
	}
	// Every layer of r's family that reported r, or was at an older
	// revision (latestBefore), or carried one r replaced (its every
	// report began after r's), unless the revision it was at is of
	// another source; in order, as the family keeps its layers.
	var configured map[Emitter]bool
	if len(cfg.Layers) > 0 {
		configured = make(map[Emitter]bool, len(cfg.Layers))
		for _, l := range cfg.Layers {
			configured[l] = true
		}
	}
	fam := r.fam.sortedLayers()
	layers, was = make([]Emitter, 0, len(fam)+len(extra)), make([]string, 0, len(fam)+len(extra))
	for _, l := range fam {
		if r.ev[l] != nil {
			layers, was = append(layers, l), append(was, "")
			continue
		}
		if at, expect := c.lastAt(l, r, preds); expect || configured[l] {
			layers, was = append(layers, l), append(was, at.revisionOn(l))
		}
	}
	// The few outside the family, each in its place; a layer configured
	// twice once.
	for _, l := range extra {
		i, found := slices.BinarySearchFunc(layers, l, compareEmitters)
		if found {
			continue
		}
		at := ""
		if r.ev[l] == nil {
			at = c.wasAt(r, l, preds)
		}
		layers, was = slices.Insert(layers, i, l), slices.Insert(was, i, at)
	}
	return layers, was, preds
}

// predSet is the revisions a rollout replaced, each with how many of its
// emitters reported it just before (predecessor): the evaluation reads
// only which they are, and the count tells, as a log's entries come and
// go around the rollout's, when one stops or starts being one
// (incremental.go, predMove).
type predSet map[string]int

func (p predSet) has(hash string) bool { return p[hash] > 0 }

// predecessor is the revision r replaced on emitter e: the one e reported
// just before; none for a release, whose reports follow its layer's.
func (c *cluster) predecessor(r *rolloutState, e Emitter) string {
	if e.IsRelease() {
		return ""
	}
	return c.logs[e].before(r.position(e))
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
// (docs/verdicts.md, "Precedence and time"). It is pure: the same evidence
// and now give the same view whatever order the evidence arrived in. It runs in
// phases: what the evidence says of the rollout as a whole, the expected
// layers, each layer's progress, then (finish) supersession, the decision,
// and the explanation people read.
//
// This is the reference: it reads everything afresh. The engine evaluates
// incrementally (incremental.go), patching the layers whose inputs changed,
// and tests check the two agree after every batch.
func (c *cluster) evaluate(r *rolloutState, cfg *Config, now time.Time) *View {
	expected, was, preds := c.expected(r, cfg)
	slots := make([]slot, len(expected))
	for i, l := range expected {
		slots[i] = c.slotWas(r, l, was[i])
	}
	return c.finish(header(r, cfg), r, expected, slots, preds, dependsOn(r), now)
}

// finish completes a view from its header and the expected layers' slots,
// folding every slot in order with the rule the engine's tally folds as a
// tree (leaf and combine, tally.go): the reference.
func (c *cluster) finish(v *View, r *rolloutState, expected []Emitter, slots []slot, preds predSet, deps map[string][]string, now time.Time) *View {
	ls := make([]LayerView, len(slots))
	var failing []int
	var behind []string
	top, nexts := nopick(), map[string]*earliest{}
	for i := range slots {
		s := &slots[i]
		ls[i] = s.lv
		top = combine(slots, top, leaf(slots, deps, i))
		if !s.firstFailure.IsZero() {
			failing = append(failing, i)
		}
		if !s.succeeded {
			behind = append(behind, s.lv.Name)
		}
		if s.hasNext {
			addNext(nexts, s.next)
		}
	}
	v.Layers = MakeLayers(ls)
	return c.conclude(v, r, expected, sums{c.progress(r, slots, preds, top, nexts), failing, behind, top.rootCause(slots)}, now)
}

// sums are what a view is concluded from: what its slots add up to.
type sums struct {
	progress
	failing []int    // slots with a failure, ascending
	behind  []string // names of the layers that did not apply, in order
	root    string   // the root cause, shown while the rollout is under way or stuck
}

// conclude completes a view whose layers are set from what its slots add
// up to: supersession, the decision, and the explanation people read.
func (c *cluster) conclude(v *View, r *rolloutState, expected []Emitter, p sums, now time.Time) *View {
	v.Failures = failureViews(r, expected, p.failing, p.progress)
	if h := p.superseder(); h != "" {
		sv := c.rollouts[h]
		rev := sv.rev
		v.SupersededBy, v.SupersedeKey = &rev, &sv.key
	}
	v.Verdict, v.Late = decide(facts{
		completed: p.completed, completedAt: p.completedAt, firstFailure: p.firstFailure,
		superseded: v.SupersededBy != nil, supersededAt: p.supAt, deadline: v.Deadline,
	}, now)
	if p.completed {
		// Applied, or failed before it completed: decide says no other.
		at := p.completedAt
		v.CompletedAt = &at
	} else {
		v.Behind = p.behind
	}
	if v.Verdict == VerdictStuck || v.Verdict == VerdictApplying {
		v.RootCause = p.root
	}
	v.Terminal = v.Verdict.Terminal()
	v.Summary = summary(v, len(expected), len(v.Behind))
	return v
}

// header is what the evidence says of the rollout as a whole: its times,
// where its expected layers come from, its revision, origin, source and
// commit subject. The reference folds the evidence afresh; the engine
// keeps the folds (r.folds).
func header(r *rolloutState, cfg *Config) *View {
	var f folds
	for e, ev := range r.ev {
		f.add(e, ev)
	}
	return f.header(r, cfg)
}

func (f *folds) header(r *rolloutState, cfg *Config) *View {
	v := newHeader(r, cfg, f.known)
	v.Revision, v.Origin, v.OriginHash, v.Source, v.Subject = f.rev, f.origin, f.originHash, f.source, f.subject
	if cfg.CommitOf != nil {
		v.Commit = cfg.CommitOf(v.Revision, v.Origin, v.Source.Kind)
	}
	return v
}

func newHeader(r *rolloutState, cfg *Config, known bool) *View {
	v := &View{
		Cluster:      r.key.Cluster,
		Hash:         r.key.Hash,
		FirstSeen:    r.first,
		LastSeen:     r.last,
		Deadline:     r.first.Add(cfg.StuckAfter),
		ExpectedFrom: ExpectedFromEvents,
	}
	switch {
	case known:
		v.ExpectedFrom = ExpectedFromCluster
	case len(cfg.Layers) > 0:
		v.ExpectedFrom = ExpectedFromConfig
	}
	return v
}

// progress is where the expected layers stand on a rollout.
type progress struct {
	completed    bool      // every expected layer (at least one) succeeded
	completedAt  time.Time // the last of those successes
	firstFailure time.Time // earliest failure on an expected layer; zero: none
	// The earliest revision an expected layer moved to next that is newer
	// everywhere and not one this rollout replaced.
	supAt   time.Time
	supHash string
	working bool // a layer is still applying this revision
}

// newer reports whether the rollout of hash began after r (ties by hash)
// and is not one r replaced.
func (c *cluster) newer(hash string, r *rolloutState, preds predSet) bool {
	if preds.has(hash) {
		return false
	}
	sr := c.rollouts[hash]
	return sr != nil && (sr.first.After(r.first) || sr.first.Equal(r.first) && hash > r.key.Hash)
}

// superseder is the revision that superseded this one, or "". Replaced
// after it completed is the normal course of things. And while a layer that
// has not moved on still applies this revision (checking its health, say),
// its own outcome comes first: Flux finishes that work unless told to
// cancel it, so declaring the revision superseded now would turn into
// "failed" later, and a verdict a pipeline stopped on must not change.
func (p progress) superseder() string {
	if p.completed && !p.supAt.Before(p.completedAt) || p.working {
		return ""
	}
	return p.supHash
}

// failureViews lists every failure on the expected layers with one (the
// indexes of failing, ascending), oldest first.
func failureViews(r *rolloutState, expected []Emitter, failing []int, p progress) []FailureView {
	out := []FailureView{}
	for _, i := range failing {
		l := expected[i]
		ev := r.ev[l]
		for _, f := range ev.Failures {
			out = append(out, FailureView{
				Layer: l.Layer(), Class: f.Class, Reason: f.Reason, Message: f.Message,
				Objects: nonNil(f.Objects), At: f.First, LastAt: f.Last,
				AfterApplied: p.completed && f.First.After(p.completedAt),
			})
		}
		for _, h := range ev.holds() {
			rev := r.ev[h.Release]
			if rev == nil {
				continue
			}
			for _, f := range rev.Failures {
				fv := FailureView{
					Layer: l.Layer(), Release: h.Release.Ref(), Class: f.Class, Reason: f.Reason, Message: f.Message,
					Objects: nonNil(f.Objects), At: f.First, LastAt: f.Last,
					AfterApplied: p.completed && f.First.After(p.completedAt),
				}
				if rm := rev.remedy(); !rm.stepOf(f.Reason) {
					recovered := rev.recoveredAt()
					fv.Remediation, fv.Stalled = rm.Story(recovered), rm.stalled(recovered)
				}
				out = append(out, fv)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b FailureView) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if c := strings.Compare(a.Layer, b.Layer); c != 0 {
			return c
		}
		return strings.Compare(a.Release.String(), b.Release.String())
	})
	return out
}

// facts are what the verdict is decided from.
type facts struct {
	completed    bool      // every expected layer succeeded
	completedAt  time.Time // when the last of them did
	firstFailure time.Time // the earliest failure on an expected layer; zero: none
	superseded   bool      // a newer revision superseded it (see superseder)
	supersededAt time.Time
	deadline     time.Time
}

// decide is the verdict's precedence (docs/verdicts.md, "Precedence and time"). A
// failure stamped in the same second as the completing success sorts
// before it; evidence stamped after the deadline cannot undo "stuck",
// except the full completion that turns it into a late "applied".
func decide(f facts, now time.Time) (v Verdict, late bool) {
	failedBy := func(t time.Time) bool { return !f.firstFailure.IsZero() && !f.firstFailure.After(t) }
	switch {
	case f.completed && failedBy(f.completedAt):
		return VerdictFailed, false
	case f.completed:
		return VerdictApplied, f.completedAt.After(f.deadline)
	case failedBy(f.deadline):
		return VerdictFailed, false
	case f.superseded && !f.supersededAt.After(f.deadline):
		return VerdictSuperseded, false
	case !now.Before(f.deadline):
		return VerdictStuck, false
	}
	return VerdictApplying, false
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
	if ev.Member != nil {
		lv.DependsOn = ev.Member.DependsOn // never changed in place: shared
	}
	first := ev.First
	lv.Since = &first
	if h := ev.Details().HealthPassed; !h.IsZero() {
		lv.Healthy = &h
	}
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
		lv.Revision, lv.Since = "", nil
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

// rootWeight ranks the layers behind as root causes, lightest first.
func rootWeight(s LayerState) int {
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

// blocked reports whether a layer that dependsOn names is behind.
func blocked(slots []slot, deps map[string][]string, name string) bool {
	for _, d := range deps[name] {
		if i, found := findLayer(slots, d); found && !slots[i].succeeded {
			return true
		}
	}
	return false
}

// findLayer finds the slot of a layer by name.
func findLayer(slots []slot, name string) (int, bool) {
	return slices.BinarySearchFunc(slots, name, func(s slot, name string) int {
		return compareLayerNames(s.lv.Name, name)
	})
}

// compareLayerNames orders "namespace/name" the way Emitter.less orders
// layers: by namespace, then name.
func compareLayerNames(a, b string) int {
	ans, aname, _ := strings.Cut(a, "/")
	bns, bname, _ := strings.Cut(b, "/")
	if c := strings.Compare(ans, bns); c != 0 {
		return c
	}
	return strings.Compare(aname, bname)
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

// DecidingFailure is the failure a failed rollout is told by: its first
// that is the deploy's own, not a degradation after it applied; nil when
// none.
func (v *View) DecidingFailure() *FailureView {
	for i := range v.Failures {
		if !v.Failures[i].AfterApplied {
			return &v.Failures[i]
		}
	}
	return nil
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
		f := v.DecidingFailure()
		switch {
		case f == nil:
		case f.Release != (Ref{}):
			s := fmt.Sprintf("%s failed: %s %s", f.Layer, f.Release, f.Reason)
			if f.Stalled {
				s += "; stalled, a new commit is needed"
			}
			return s
		default:
			return fmt.Sprintf("%s failed: %s", f.Layer, f.Reason)
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

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
