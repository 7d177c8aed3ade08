// Package rollout is the domain: observations of layers and revisions come
// in, one verdict per rollout (cluster, revision hash) comes out, with what
// it makes due (mails, verdicts for a forge: how their delivery goes is
// internal/outbox's). It imports nothing internal and knows no revision
// syntax: adapters translate Flux events and cluster state into
// Observations, give it the edge's rules (Config: ClassOf, RoleOf,
// CommitOf) and read Views.
package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Signal is what an observation says about an emitter's progress on a
// revision.
type Signal uint8

const (
	SignalProgressing Signal = iota + 1 // changes applied or health passed: attempting
	SignalWaiting                       // blocked behind a dependency: attempting
	SignalCanceled                      // left for a newer revision: not a failure
	SignalFailed                        // the revision failed on this layer
	SignalSucceeded                     // positive evidence the layer applied the revision
	SignalArtifact                      // a source produced the revision
	// From cluster state: while the revision was its source's current
	// artifact, the layer was expected to apply it, or was suspended.
	SignalExpected
	SignalSuspended
	// SignalPending is a release's status read before helm-controller
	// acted on the spec its layer applied: it never follows a report of
	// that action, whatever the seconds say.
	SignalPending
)

var signalNames = [...]string{"", "progressing", "waiting", "canceled", "failed", "succeeded", "artifact", "expected", "suspended", "pending"}

func (s Signal) String() string {
	if int(s) < len(signalNames) {
		return signalNames[s]
	}
	return "invalid"
}

// rank orders marks of the same second: the one that says more about
// progress wins, and a failure sorts before a success.
func (s Signal) rank() int {
	switch s {
	case SignalWaiting:
		return 1
	case SignalProgressing, SignalArtifact:
		return 2
	case SignalCanceled:
		return 3
	case SignalFailed:
		return 4
	case SignalSucceeded, SignalExpected:
		return 5
	case SignalSuspended:
		return 6
	}
	return 0
}

// Emitter is the object an observation is about: a layer, which applies
// revisions, or a source, which produces them. Its role is given by the
// edge that names it (ingest, from Flux's kind); the model reads the kind
// only to name the emitter.
type Emitter struct {
	Role      Role   `json:"-"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Role is what an emitter is to rollouts. Persisted as its number.
type Role uint8

const (
	RoleSource Role = 1 // produces revisions
	RoleLayer  Role = 2 // applies them: a rollout's expected layers are of this role
	// RoleRelease is an object a layer applies that has its own rollout (a
	// HelmRelease): its evidence tells no revision of its own, it belongs to
	// the revision whose apply changed it (a layer's Holds), and that layer
	// has applied the revision only once it is released.
	RoleRelease Role = 3
)

// KnownRole reports whether r is one of the roles above.
func KnownRole(r Role) bool { return r == RoleSource || r == RoleLayer || r == RoleRelease }

// IsLayer reports whether the emitter is a layer.
func (e Emitter) IsLayer() bool { return e.Role == RoleLayer }

// IsSource reports whether the emitter is a source.
func (e Emitter) IsSource() bool { return e.Role == RoleSource }

// IsRelease reports whether the emitter is a release inside a layer.
func (e Emitter) IsRelease() bool { return e.Role == RoleRelease }

// Layer names a layer the way people and --layers do: namespace/name.
func (e Emitter) Layer() string { return e.Namespace + "/" + e.Name }

func (e Emitter) String() string { return e.Kind + "/" + e.Namespace + "/" + e.Name }

// Ref is the object it names, without its role.
func (e Emitter) Ref() Ref { return Ref{e.Kind, e.Namespace, e.Name} }

// Ref names a Flux object by its kind, namespace and name, as a view
// carries a rollout's source; it reads and writes (JSON, records) as the
// text Kind/namespace/name, "" for none.
type Ref struct{ Kind, Namespace, Name string }

func (r Ref) String() string {
	if r == (Ref{}) {
		return ""
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// MarshalText writes r as Kind/namespace/name.
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (r *Ref) UnmarshalText(b []byte) error {
	var err error
	*r, err = ParseRef(string(b))
	return err
}

// ParseRef reads Kind/namespace/name ("" is none): the records' and the
// API's text of a Ref.
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{}, nil
	}
	kind, rest, _ := strings.Cut(s, "/")
	ns, name, ok := strings.Cut(rest, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return Ref{}, fmt.Errorf("%q is not Kind/namespace/name", s)
	}
	return Ref{kind, ns, name}, nil
}

// less orders emitters for stable output.
func (e Emitter) less(o Emitter) bool {
	if e.Namespace != o.Namespace {
		return e.Namespace < o.Namespace
	}
	if e.Name != o.Name {
		return e.Name < o.Name
	}
	return e.Kind < o.Kind
}

// Object is a Kubernetes object a failure names (PruneFailed).
type Object struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	Error     string    `json:"error"`
	At        time.Time `json:"at"`
}

// FailureClass is what kind of failure an emitter reported, told by
// ingest from Flux's reason: the decisions and pages read it, never Flux's
// reasons. Persisted as its name.
type FailureClass string

const (
	FailureOther    FailureClass = ""         // an error no class names
	FailurePrune    FailureClass = "prune"    // objects removed from the source could not be deleted (they name them)
	FailureHealth   FailureClass = "health"   // the health checks of what was applied failed
	FailureBuild    FailureClass = "build"    // the manifests did not build
	FailureApply    FailureClass = "apply"    // the apply itself failed
	FailureAccess   FailureClass = "access"   // a cross-namespace reference was denied
	FailureArtifact FailureClass = "artifact" // the source's artifact could not be fetched
	FailureConfig   FailureClass = "config"   // the object's own spec cannot work (a CEL expression, a feature gate)
	// A release's: its install, upgrade, rollback or uninstall failed, or
	// its tests did.
	FailureRelease FailureClass = "release"
	FailureTest    FailureClass = "test"
)

// Observation is one fact about one emitter and one revision.
type Observation struct {
	Cluster    string
	Emitter    Emitter
	Revision   string // full Flux revision as reported
	Hash       string // the revision's identity
	Origin     string // originRevision (OCI), as reported
	OriginHash string // the origin revision's identity
	At         time.Time
	Signal     Signal
	Reason     string
	Message    string
	Class      FailureClass // with SignalFailed
	Objects    []Object     // for failures that name objects
	Subject    string       // commit subject, when a source told it
	MailTo     []string     // recipients the event's Alert routes it to (eventMetadata mail_to)
	DependsOn  []string     // with SignalExpected/Suspended: the layers this one depends on (ns/name)
	Healthy    bool         // a progress event saying the health checks passed
	// Holds, with a layer's progress, are the releases its apply of the
	// revision created or changed: they belong to this revision on it.
	Holds []Emitter
	// A release's state from the cluster rather than from its events:
	// Applied is when kustomize-controller's apply last changed it (its
	// managedFields), which attributes the observation (attribute), and
	// Status says it is read from status, where helm-controller says which
	// generation it acted on: a success from it is a release of the spec
	// that apply made.
	Applied time.Time
	Status  bool
	// Commit, with a release's report, is the commit its chart was built
	// from or its annotations name (lowercase hex, a prefix of the hash):
	// the report belongs to that commit's rollout on the release's layer
	// (named), whether or not the commit changed the release's spec.
	Commit string
	// Layer, with a release's state read from the cluster, is the layer
	// that applies it (its owner labels); from events it is the layer that
	// held the release last.
	Layer Emitter
	// Remedy, with a release's report, is what helm-controller did after
	// its failed action, as far as this report tells (a remediation, the
	// failure counter, a stall).
	Remedy *Remedy
}

// maxMessage bounds what is kept of a Flux message (up to 39,000 characters
// on the wire): enough for people to act, small enough to keep every
// rollout in memory.
const maxMessage = 8 << 10

// Mark is one remembered event.
type Mark struct {
	At      time.Time `json:"at"`
	Signal  Signal    `json:"signal"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// after orders marks by Flux time, then by what they say, then by text, so
// that the latest mark does not depend on arrival order. A pending mark
// (nothing done yet) comes before every other: Flux's times are whole
// seconds, and a release often acts in the second its spec was applied.
func (m Mark) after(o Mark) bool {
	if p, q := m.Signal == SignalPending, o.Signal == SignalPending; p != q {
		return q
	}
	if !m.At.Equal(o.At) {
		return m.At.After(o.At)
	}
	if m.Signal.rank() != o.Signal.rank() {
		return m.Signal.rank() > o.Signal.rank()
	}
	if m.Reason != o.Reason {
		return m.Reason > o.Reason
	}
	return m.Message > o.Message
}

// Failure is every failure of one reason on one layer for one revision.
type Failure struct {
	Class   FailureClass `json:"class,omitempty"`
	Reason  string       `json:"reason"`
	Message string       `json:"message"` // of the earliest occurrence
	First   time.Time    `json:"first"`
	Last    time.Time    `json:"last"`
	Objects []Object     `json:"objects,omitempty"`
}

// Evidence is everything known about one emitter and one revision. Merge is
// commutative, associative and idempotent, so duplicated and reordered
// deliveries reach the same Evidence.
type Evidence struct {
	Revision string `json:"revision"`
	// Detail is nil for the evidence of most emitters, which tell none
	// (read it with Details). Its fields encode among Evidence's own.
	*Detail
	First         time.Time `json:"first"`
	Last          time.Time `json:"last"`
	Progress      *Mark     `json:"progress,omitempty"`  // latest attempting mark
	Succeeded     *Mark     `json:"succeeded,omitempty"` // earliest success
	LastSucceeded time.Time `json:"last_succeeded,omitzero"`
	Failures      []Failure `json:"failures,omitempty"` // one per reason, sorted by reason
	// Member is the cluster's latest word on whether this layer must apply
	// this revision (SignalExpected or SignalSuspended), with its dependsOn.
	Member *Member `json:"member,omitempty"`
	// Inside is what is known of the releases inside a layer: nil for the
	// evidence of most emitters, which have none (a pointer, so that each
	// of them pays 8 bytes for it, not 56: the live set is mostly layers'
	// evidence).
	Inside *Inside `json:"inside,omitempty"`
}

// Detail is what only some emitters tell of a revision: a source its
// subject and origin, a layer the recipients its Alerts route it to and
// when its health checks passed. Behind a pointer, the evidence of the
// others (every release, most layers) is 112 bytes smaller: the live set
// is mostly their evidence.
type Detail struct {
	Origin       string    `json:"origin,omitempty"`
	OriginHash   string    `json:"origin_hash,omitempty"`
	Subject      string    `json:"subject,omitempty"`
	MailTo       []string  `json:"mail_to,omitempty"`      // sorted union of the routed recipients
	HealthPassed time.Time `json:"health_passed,omitzero"` // earliest "health checks passed"
}

// Details is what ev's emitter told beyond its progress, zero when nothing.
func (ev *Evidence) Details() Detail {
	if ev.Detail == nil {
		return Detail{}
	}
	return *ev.Detail
}

// detail is ev's Detail, made when it has none.
func (ev *Evidence) detail() *Detail {
	if ev.Detail == nil {
		ev.Detail = &Detail{}
	}
	return ev.Detail
}

// Inside is a layer's, or a release's, part in releases inside layers.
type Inside struct {
	// Holds, of a layer, are the releases its apply of this revision
	// created or changed, each with the earliest report naming it; sorted.
	Holds []Hold `json:"holds,omitempty"`
	// Of a release: Watched is its earliest state read from the cluster's
	// status, and Confirmed the earliest success there. Once its status is
	// watched, a success counts only when the status confirms it: an event
	// cannot say which spec the action it reports was for.
	Watched   time.Time `json:"watched,omitzero"`
	Confirmed *Mark     `json:"confirmed,omitempty"`
	// Remedy, of a release, is what helm-controller did after its failed
	// action: remediations, retries, a stall.
	Remedy *Remedy `json:"remedy,omitempty"`
}

// holds are the releases a layer's evidence holds.
func (ev *Evidence) holds() []Hold {
	if ev == nil || ev.Inside == nil {
		return nil
	}
	return ev.Inside.Holds
}

// inside is ev's Inside, made when it has none.
func (ev *Evidence) inside() *Inside {
	if ev.Inside == nil {
		ev.Inside = &Inside{}
	}
	return ev.Inside
}

// Hold is a release a layer's apply of a revision changed, and when the
// layer first said so: the release's evidence after it, until the layer's
// next apply that changes it, is about this revision.
type Hold struct {
	Release Emitter   `json:"release"`
	At      time.Time `json:"at"`
}

// Member is a membership mark from cluster state.
type Member struct {
	Mark
	DependsOn []string `json:"depends_on,omitempty"`
}

// expectedByCluster reports whether the cluster's membership marks make a
// layer with this evidence expected: marked so, or marked suspended once
// it had applied or failed the revision (the suspension says it will not
// apply it, and it did: the oracle's cluster stand-in, oracle_test.go).
// nil is not.
func (ev *Evidence) expectedByCluster() bool {
	return ev != nil && ev.Member != nil && (ev.Member.Signal == SignalExpected || ev.Succeeded != nil || len(ev.Failures) > 0)
}

// reported is whether the emitter itself said something about the
// revision, beyond the cluster's membership mark.
func (ev *Evidence) reported() bool {
	return ev.Progress != nil || ev.Succeeded != nil || len(ev.Failures) > 0
}

func (ev *Evidence) clone() *Evidence {
	if ev == nil {
		return &Evidence{}
	}
	c := *ev
	if ev.Progress != nil {
		p := *ev.Progress
		c.Progress = &p
	}
	if ev.Succeeded != nil {
		s := *ev.Succeeded
		c.Succeeded = &s
	}
	if ev.Inside != nil {
		in := *ev.Inside
		in.Holds = slices.Clone(in.Holds)
		if in.Confirmed != nil {
			m := *in.Confirmed
			in.Confirmed = &m
		}
		in.Remedy = in.Remedy.clone()
		c.Inside = &in
	}
	if ev.Member != nil {
		m := *ev.Member
		m.DependsOn = slices.Clone(m.DependsOn)
		c.Member = &m
	}
	if ev.Detail != nil {
		d := *ev.Detail
		d.MailTo = slices.Clone(d.MailTo)
		c.Detail = &d
	}
	c.Failures = make([]Failure, len(ev.Failures))
	for i, f := range ev.Failures {
		f.Objects = slices.Clone(f.Objects)
		c.Failures[i] = f
	}
	return &c
}

// merge folds o into ev and reports whether anything was learned.
func (ev *Evidence) merge(o Observation) bool {
	changed := false
	if ev.Revision == "" || betterRevision(o.Revision, ev.Revision) {
		changed = changed || ev.Revision != o.Revision
		ev.Revision = o.Revision
	}
	if d := ev.Details(); o.OriginHash != "" && (d.OriginHash == "" || o.OriginHash < d.OriginHash || o.OriginHash == d.OriginHash && o.Origin < d.Origin) {
		ev.detail().Origin, ev.detail().OriginHash, changed = o.Origin, o.OriginHash, true
	}
	if d := ev.Details(); o.Subject != "" && (d.Subject == "" || o.Subject < d.Subject) {
		ev.detail().Subject, changed = o.Subject, true
	}
	for _, a := range o.MailTo {
		if i, found := slices.BinarySearch(ev.Details().MailTo, a); !found {
			d := ev.detail()
			d.MailTo, changed = slices.Insert(d.MailTo, i, a), true
		}
	}
	if ev.First.IsZero() || o.At.Before(ev.First) {
		ev.First, changed = o.At, true
	}
	if n := ev.newHolds(o.Holds); n > 0 {
		// Room for them all at once: inserted one by one, three holds
		// would take room for four.
		ev.inside().Holds = slices.Grow(ev.Inside.Holds, n)
	}
	for _, rel := range o.Holds {
		in := ev.Inside
		i, found := slices.BinarySearchFunc(in.Holds, rel, compareHold)
		switch {
		case !found:
			in.Holds, changed = slices.Insert(in.Holds, i, Hold{Release: rel, At: o.At}), true
		case o.At.Before(in.Holds[i].At):
			in.Holds[i].At, changed = o.At, true
		}
	}
	if o.At.After(ev.Last) {
		ev.Last, changed = o.At, true
	}
	m := Mark{At: o.At, Signal: o.Signal, Reason: o.Reason, Message: o.Message}
	if o.Remedy != nil {
		in := ev.inside()
		if in.Remedy == nil {
			in.Remedy, changed = &Remedy{}, true
		}
		changed = in.Remedy.merge(o.Remedy) || changed
	}
	if o.Status {
		in := ev.inside()
		if in.Watched.IsZero() || o.At.Before(in.Watched) {
			in.Watched, changed = o.At, true
		}
		if o.Signal == SignalSucceeded && (in.Confirmed == nil || in.Confirmed.after(m)) {
			in.Confirmed, changed = &m, true
		}
	}
	switch o.Signal {
	case SignalSucceeded:
		if ev.Succeeded == nil || ev.Succeeded.after(m) {
			ev.Succeeded, changed = &m, true
		}
		// The latest success tells a recovery from a failure; for a clean
		// layer it only moves forward with each heartbeat.
		if o.At.After(ev.LastSucceeded) {
			ev.LastSucceeded, changed = o.At, true
		}
	case SignalFailed:
		changed = ev.mergeFailure(o) || changed
	case SignalProgressing, SignalWaiting, SignalCanceled, SignalPending:
		if ev.Progress == nil || m.after(*ev.Progress) {
			ev.Progress, changed = &m, true
		}
		if h := ev.Details().HealthPassed; o.Healthy && (h.IsZero() || o.At.Before(h)) {
			ev.detail().HealthPassed, changed = o.At, true
		}
	case SignalExpected, SignalSuspended:
		mm := Member{Mark: Mark{At: o.At, Signal: o.Signal}, DependsOn: slices.Sorted(slices.Values(o.DependsOn))}
		if ev.Member == nil || mm.after(ev.Member.Mark) ||
			mm.Mark == ev.Member.Mark && strings.Join(mm.DependsOn, ",") > strings.Join(ev.Member.DependsOn, ",") {
			ev.Member, changed = &mm, true
		}
	}
	return changed
}

func compareHold(h Hold, e Emitter) int { return compareEmitters(h.Release, e) }

// newHolds counts the releases of holds that ev does not hold yet.
func (ev *Evidence) newHolds(holds []Emitter) int {
	n := 0
	for _, rel := range holds {
		if _, found := slices.BinarySearchFunc(ev.holds(), rel, compareHold); !found {
			n++
		}
	}
	return n
}

func (ev *Evidence) mergeFailure(o Observation) bool {
	i, found := slices.BinarySearchFunc(ev.Failures, o.Reason, func(f Failure, r string) int {
		return strings.Compare(f.Reason, r)
	})
	if !found {
		ev.Failures = slices.Insert(ev.Failures, i, Failure{Class: o.Class, Reason: o.Reason, Message: o.Message, First: o.At, Last: o.At})
	}
	f := &ev.Failures[i]
	changed := !found
	if f.Class == FailureOther && o.Class != FailureOther {
		// A class over none, whatever came first: the fold stays
		// commutative (ingest gives one reason one class).
		f.Class, changed = o.Class, true
	}
	if o.At.Before(f.First) || o.At.Equal(f.First) && o.Message < f.Message {
		f.First, f.Message, changed = o.At, o.Message, true
	}
	if o.At.After(f.Last) {
		f.Last, changed = o.At, true
	}
	for _, obj := range o.Objects {
		obj.At = o.At
		j, ok := slices.BinarySearchFunc(f.Objects, obj, compareObject)
		switch {
		case !ok:
			f.Objects, changed = slices.Insert(f.Objects, j, obj), true
		case obj.At.Before(f.Objects[j].At) || obj.At.Equal(f.Objects[j].At) && obj.Error < f.Objects[j].Error:
			f.Objects[j], changed = obj, true
		}
	}
	return changed
}

func compareObject(a, b Object) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// betterRevision picks one spelling of a revision deterministically when
// the same hash was reported with two refs: the smaller. The edge renders
// every revision in Flux's current form, so no other syntax reaches here.
func betterRevision(a, b string) bool { return a < b }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
