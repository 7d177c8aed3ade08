package rollout

import (
	"container/heap"
	"errors"
	"fmt"
	"time"
)

// Config is the model's part of the service configuration.
type Config struct {
	// Layers are expected in every rollout of every cluster (--layers).
	Layers []Emitter
	// StuckAfter is how long a rollout may take from its first evidence.
	StuckAfter time.Duration
	// Retention is how long a rollout is kept after its last evidence.
	Retention time.Duration
	// DefaultCluster names the cluster of events without metadata.cluster.
	DefaultCluster string
	// MailTo receive every mail (--mail-to); Alerts add recipients per layer.
	MailTo []string
	// SettleAfter is how long a terminal rollout whose emitters all moved
	// on must stay quiet before it is settled: compacted into its final
	// view on disk, its evidence dropped. It covers late deliveries
	// (notification-controller retries within its Provider timeout, 15 s
	// by default). Zero means DefaultSettleAfter.
	SettleAfter time.Duration
	// Verify checks, after every batch, each live view against a fresh
	// evaluation and panics on a difference (tests: incremental.go).
	Verify bool
	// ClassOf classes, at Load, the failures of evidence stored before
	// failures had classes (by their reason, as the edge that made them
	// does: ingest.FailureClass); nil leaves them FailureOther.
	ClassOf func(reason string) FailureClass
	// RoleOf gives, at Load, their role to emitters stored before records
	// kept it (by their kind, as the edge does: ingest.RoleOf); without
	// it, such a record fails the load.
	RoleOf func(kind string) Role
	// CommitOf is which git commit a rollout of revision deployed (origin:
	// an artifact's origin revision; sourceKind: its source's kind, ""
	// when unknown), "" when none: the edge's rule (flux.GitCommit).
	// Views carry it (View.Commit); nil, they carry none.
	CommitOf func(revision, origin, sourceKind string) string
	// Publish records each verdict change for the forge outbox (Published):
	// set when a channel (a forge, a chat, a webhook) shows the verdicts.
	Publish bool
	// Progress publishes, with Publish, each change of how many layers
	// applied a rollout still applying (Published.Progress): set when a
	// channel shows it (a chat message updated in place).
	Progress bool
}

// DefaultSettleAfter is the SettleAfter used when none is set.
const DefaultSettleAfter = time.Hour

// Batch is one transaction's worth of changes for the store.
type Batch struct {
	Puts    map[EvidenceKey]*Evidence
	Deletes []EvidenceKey
	Forget  []Key  // rollouts collected or settled: the keys of their mails go too
	Mails   []Mail // mails made due, for the outbox
	// Published are the verdicts to deliver to a forge (its outbox), with
	// Config.Publish.
	Published []Published
	// Settle are the final views of rollouts that can no longer change;
	// their evidence is in Deletes.
	Settle []*View
	// Floors are the emitters' floors the settled rollouts raised.
	Floors map[FloorKey]Floor
	// PurgeBefore, when set, drops settled rollouts whose last evidence is
	// older (retention).
	PurgeBefore time.Time
	At          time.Time
}

// Empty reports whether b has nothing to store.
func (b *Batch) Empty() bool {
	return len(b.Puts) == 0 && len(b.Deletes) == 0 && len(b.Mails) == 0 && len(b.Settle) == 0 && len(b.Published) == 0 && b.PurgeBefore.IsZero()
}

// FloorKey names one emitter of one cluster.
type FloorKey struct {
	Cluster string
	Emitter Emitter
}

// Floor is the newest entry of an emitter's log that was settled (its first
// evidence and hash). Evidence for a revision new to the emitter whose
// predecessor in the log would be settled (it is older than the floor, or
// between the floor and the next live entry) is about history that no
// longer exists, so it is ignored.
type Floor struct {
	First time.Time
	Hash  string
}

// Change is what one step of the model decided: the Batch to store, and,
// once it is stored, the views to publish (Views; Forget: to unpublish)
// and the verdict changes to report. Until it is stored, the model already holds
// it: a failed commit must be undone by loading the model again.
type Change struct {
	Batch
	// Views are the views the step changed, published once it is stored;
	// they follow from the batch, and alone are no reason to commit.
	Views    []*View
	Verdicts []VerdictChange
}

// VerdictChange is a rollout that appeared (New) or whose verdict changed.
type VerdictChange struct {
	View *View
	From Verdict // unless New
	New  bool
}

// Loader reads the stored state: evidence for every record of a live
// rollout, mailed for the key of every mail enqueued for one (pending,
// sent or dead), and floor for every emitter's floor.
type Loader interface {
	Load(evidence func(EvidenceKey, *Evidence) error, mailed func(key string), floor func(FloorKey, Floor) error) error
}

// Model holds every live rollout and decides on it: evidence merged in,
// views evaluated, mails made due, deadlines, settling and retention. It
// does no I/O but Load and is not safe for concurrent use: one owner (the
// engine's leader) applies each step and stores its Change.
type Model struct {
	cfg      Config
	clusters map[string]*cluster
	due      deadlines
	loading  bool // rebuilding from the store: nothing new is happening
	nextSeq  uint64

	mailed map[string]struct{} // keys of every mail enqueued: each goes out once
	// stuckMailed: rollouts whose stuck mail was enqueued, to anyone (load).
	stuckMailed map[Key]bool
}

// NewModel checks cfg and returns an empty model; Load fills it.
func NewModel(cfg Config) (*Model, error) {
	if cfg.StuckAfter <= 0 {
		return nil, errors.New("stuck-after must be positive")
	}
	if cfg.DefaultCluster == "" {
		cfg.DefaultCluster = "default"
	}
	if cfg.SettleAfter <= 0 {
		cfg.SettleAfter = DefaultSettleAfter
	}
	for _, l := range cfg.Layers {
		if !l.IsLayer() {
			return nil, fmt.Errorf("configured layer %s is not of the layer role", l)
		}
	}
	m := &Model{cfg: cfg}
	m.reset()
	return m, nil
}

func (m *Model) reset() {
	m.clusters = map[string]*cluster{}
	m.due = nil
	m.nextSeq = 1
	m.mailed = map[string]struct{}{}
	m.stuckMailed = map[Key]bool{}
}

// ErrInvalid is an observation Normalise refuses: sending it again cannot
// help, so it is answered 400 and not retried.
var ErrInvalid = errors.New("invalid observation")

// minYear and maxYear bound an observation's time, a little inside what
// int64 Unix nanoseconds hold (1678 to 2262).
const (
	minYear = 1700
	maxYear = 2199
)

// Normalise checks an observation before it is queued and bounds its
// sizes, so that what is stored is what is judged.
func (m *Model) Normalise(o *Observation) error {
	if o.Cluster == "" {
		o.Cluster = m.cfg.DefaultCluster
	}
	switch {
	case o.Emitter.IsRelease() && (o.Hash != "" || o.Revision != ""):
		// A release's evidence tells no revision: Apply gives it the one
		// whose apply changed the release (attribute).
		return fmt.Errorf("%w: a release's observation names no revision, it is given one", ErrInvalid)
	case (o.Hash == "" || o.Revision == "") && !o.Emitter.IsRelease():
		return fmt.Errorf("%w: no revision", ErrInvalid)
	case o.Emitter.Kind == "" || o.Emitter.Namespace == "" || o.Emitter.Name == "":
		return fmt.Errorf("%w: no emitter", ErrInvalid)
	case !KnownRole(o.Emitter.Role):
		return fmt.Errorf("%w: emitter %s has no role", ErrInvalid, o.Emitter)
	case o.Commit != "" && !o.Emitter.IsRelease():
		// Its syntax is the edge's (flux.IsCommit); the model matches it as
		// a prefix of its rollouts' hashes.
		return fmt.Errorf("%w: commit %q: only a release names one", ErrInvalid, o.Commit)
	case o.Layer != (Emitter{}) && (!o.Emitter.IsRelease() || !o.Layer.IsLayer() || o.Layer.Namespace == "" || o.Layer.Name == ""):
		return fmt.Errorf("%w: %s names layer %s", ErrInvalid, o.Emitter, o.Layer)
	case len(o.Holds) > 0 && !o.Emitter.IsLayer():
		return fmt.Errorf("%w: %s holds releases but is no layer", ErrInvalid, o.Emitter)
	case o.At.IsZero():
		return fmt.Errorf("%w: no time", ErrInvalid)
	case o.Signal == 0 || o.Signal > SignalPending:
		return fmt.Errorf("%w: signal %d", ErrInvalid, o.Signal)
	case (o.Signal == SignalPending || o.Remedy != nil) && !o.Emitter.IsRelease():
		return fmt.Errorf("%w: %s says what helm-controller did but is no release", ErrInvalid, o.Emitter)
	}
	if r := o.Remedy; r != nil {
		if len(r.Steps) > maxSteps || r.Attempts < 0 || r.Remedied < 0 {
			return fmt.Errorf("%w: remediation of %s out of bounds", ErrInvalid, o.Emitter)
		}
		for i := range r.Steps {
			s := &r.Steps[i]
			if s.Kind < StepRolledBack || s.Kind > StepUninstallFailed || s.Version < 0 || s.At.IsZero() {
				return fmt.Errorf("%w: remediation step %+v of %s", ErrInvalid, *s, o.Emitter)
			}
			s.At, s.Error = s.At.UTC(), truncate(s.Error, maxMessage/4)
		}
		if m := r.Stalled; m != nil {
			if m.At.IsZero() {
				return fmt.Errorf("%w: stall of %s without a time", ErrInvalid, o.Emitter)
			}
			m.At, m.Message = m.At.UTC(), truncate(m.Message, maxMessage/4)
		}
	}
	o.At = o.At.UTC()
	if y := o.At.Year(); y < minYear || y > maxYear {
		// The store keeps times as Unix nanoseconds: outside these, the
		// time read back after a restart would not be the one judged.
		return fmt.Errorf("%w: time %s outside the years %d to %d", ErrInvalid, o.At.Format(time.RFC3339), minYear, maxYear)
	}
	for _, h := range o.Holds {
		if !h.IsRelease() || h.Kind == "" || h.Namespace == "" || h.Name == "" {
			return fmt.Errorf("%w: %s holds %s, which is no release", ErrInvalid, o.Emitter, h)
		}
	}
	o.Message = truncate(o.Message, maxMessage)
	for i := range o.Objects {
		o.Objects[i].Error = truncate(o.Objects[i].Error, maxMessage/4)
	}
	return nil
}

// Load replaces the model's state with the stored one and evaluates every
// rollout. The Change holds every view (to publish in place of all others)
// and the stuck mails that came due while no commit could decide them; if
// storing those fails, Unmail them.
func (m *Model) Load(s Loader, now time.Time) (*Change, error) {
	m.reset()
	role := func(e Emitter) (Role, error) {
		if e.Role == 0 && m.cfg.RoleOf != nil {
			e.Role = m.cfg.RoleOf(e.Kind)
		}
		if !KnownRole(e.Role) {
			return 0, fmt.Errorf("stored emitter %s has no role (Config.RoleOf) or an unknown one (%d)", e, e.Role)
		}
		return e.Role, nil
	}
	err := s.Load(func(ek EvidenceKey, ev *Evidence) error {
		var err error
		if ek.Emitter.Role, err = role(ek.Emitter); err != nil {
			return err
		}
		for i := range ev.Failures {
			if f := &ev.Failures[i]; f.Class == FailureOther && m.cfg.ClassOf != nil {
				f.Class = m.cfg.ClassOf(f.Reason)
			}
		}
		c := m.cluster(ek.Cluster)
		c.rollout(ek.Hash, ek.Seq)
		c.set(ek.Hash, ek.Emitter, ev, nil, nil)
		m.nextSeq = max(m.nextSeq, ek.Seq+1)
		return nil
	}, func(key string) { m.mailed[key] = struct{}{} }, func(fk FloorKey, f Floor) error {
		var err error
		if fk.Emitter.Role, err = role(fk.Emitter); err != nil {
			return err
		}
		m.cluster(fk.Cluster).floors[fk.Emitter] = logEntry{f.First, f.Hash}
		return nil
	})
	if err != nil {
		m.reset()
		return nil, fmt.Errorf("load state: %w", err)
	}
	all := dirtySet{}
	for _, c := range m.clusters {
		for _, r := range c.rollouts {
			all.full(r)
		}
	}
	for key := range m.mailed {
		if mk, err := ParseMailKey(key); err == nil && mk.Kind == MailStuck {
			m.stuckMailed[mk.Rollout] = true
		}
	}
	c := &Change{}
	m.loading = true
	m.recompute(c, all, now)
	m.loading = false
	return c, nil
}

// Unmail forgets that mails were enqueued, when storing them failed: the
// next evaluation that makes them due enqueues them again.
func (m *Model) Unmail(mails []Mail) {
	for _, ml := range mails {
		delete(m.mailed, ml.Key)
	}
}

// Unknown lists the rollouts that observations name and memory does not
// hold: the ones Apply must be told whether the archive has settled.
func (m *Model) Unknown(batches [][]Observation) []Key {
	var keys []Key
	seen := map[Key]bool{}
	for _, obs := range batches {
		for i := range obs {
			k := Key{obs[i].Cluster, obs[i].Hash}
			if seen[k] || k.Hash == "" {
				continue
			}
			seen[k] = true
			if cl := m.clusters[k.Cluster]; cl == nil || cl.rollouts[k.Hash] == nil {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Apply merges normalised observations into c's state and evaluates the
// rollouts they change. Observations about settled rollouts (settled, from
// the archive) or settled history (beforeFloor) are ignored. A release's
// observation that names no revision is given the one whose apply changed
// the release (attribute), once the batch's other observations are in:
// a layer's report that it changed the release may come in the same batch.
// It returns how many evidence records changed and how many observations
// were ignored.
func (m *Model) Apply(c *Change, batches [][]Observation, settled map[Key]bool, now time.Time) (learned, ignored int) {
	if c.Puts == nil {
		c.Puts = make(map[EvidenceKey]*Evidence)
	}
	// Emitters that have evidence on a rollout in this batch, by rollout.
	inBatch := map[Key]map[Emitter]bool{}
	var releases []*Observation
	for _, obs := range batches {
		for i := range obs {
			o := &obs[i]
			if o.Emitter.IsRelease() {
				releases = append(releases, o)
				continue
			}
			if !m.merge(c.Puts, o, inBatch, settled) {
				ignored++
			}
		}
	}
	// Installed before evaluating, so the views (and the mails they make
	// due) are computed from the state being committed.
	dirty := dirtySet{}
	visible := visibleSet{}
	m.install(c.Puts, dirty, visible)
	ignored += m.applyReleases(c.Puts, releases, inBatch, settled, dirty, visible)
	if len(c.Puts) == 0 {
		return 0, ignored
	}
	// Once every entry of the batch is in the logs: the rollouts that read
	// a changed one as their predecessor.
	for r, s := range visible {
		dirty.successors(r, s)
	}
	m.recompute(c, dirty, now)
	return len(c.Puts), ignored
}

// merge folds o into the evidence pending in puts (taken from memory when
// none is); false when o is ignored.
func (m *Model) merge(puts map[EvidenceKey]*Evidence, o *Observation, inBatch map[Key]map[Emitter]bool, settled map[Key]bool) bool {
	k := Key{o.Cluster, o.Hash}
	if settled[k] {
		return false
	}
	cl := m.cluster(o.Cluster)
	// A release's log follows its layers', which keep their latest entry
	// live: its own may be empty after its last rollout settled, and what
	// it reports of a later one is not history (Apply checks it against
	// the floor by its hold).
	if !o.Emitter.IsRelease() && cl.beforeFloor(o, inBatch[k][o.Emitter]) {
		return false
	}
	if inBatch[k] == nil {
		inBatch[k] = map[Emitter]bool{}
	}
	inBatch[k][o.Emitter] = true
	r := cl.rollout(o.Hash, m.nextSeq)
	if r.seq == m.nextSeq {
		m.nextSeq++
	}
	ek := EvidenceKey{r.key, r.seq, o.Emitter}
	ev, pending := puts[ek]
	if !pending {
		ev = r.ev[o.Emitter].clone()
	}
	if ev.merge(*o) && !pending {
		puts[ek] = ev
	}
	return true
}

// install puts pending evidence in the index, recording what it changes.
func (m *Model) install(puts map[EvidenceKey]*Evidence, dirty dirtySet, visible visibleSet) {
	for ek, ev := range puts {
		m.clusters[ek.Cluster].set(ek.Hash, ek.Emitter, ev, dirty, visible)
	}
}

func (m *Model) cluster(name string) *cluster {
	c := m.clusters[name]
	if c == nil {
		c = newCluster(name)
		m.clusters[name] = c
	}
	return c
}

// recompute evaluates the given rollouts, records their views, verdict
// changes and due mails in c, and arms the deadline of every rollout that
// started applying.
func (m *Model) recompute(c *Change, dirty dirtySet, now time.Time) {
	for r, d := range dirty {
		cl := m.clusters[r.key.Cluster]
		if cl == nil || cl.rollouts[r.key.Hash] != r || r.view == nil && !cl.read(r) {
			continue
		}
		// Every recomputed view is republished: comparing it with the old
		// one would cost more than waking the few readers waiting on it.
		v := cl.evaluateIn(r, d, &m.cfg, now)
		old := r.view
		r.view, r.evalAt = v, now
		c.Views = append(c.Views, v)
		if v.Verdict == VerdictApplying && (old == nil || old.Verdict != VerdictApplying || !old.Deadline.Equal(v.Deadline)) {
			heap.Push(&m.due, deadline{v.Deadline, r.key})
		}
		for _, ml := range dueMails(v, m.cfg.MailTo, r.routes) {
			// Mails evidence makes due were decided when the evidence was
			// committed, so a reload decides none of them: new configuration
			// never mails old rollouts. The stuck mail is made due by the
			// clock alone; if the deadline passed while the service was down
			// (or its commit failed), the reload is the first to see it.
			if m.loading && (ml.Kind != MailStuck || m.stuckMailed[r.key]) {
				continue
			}
			if _, ok := m.mailed[ml.Key]; !ok {
				m.mailed[ml.Key] = struct{}{}
				c.Mails = append(c.Mails, ml)
			}
		}
		switch {
		case old == nil && !m.loading:
			c.Verdicts = append(c.Verdicts, VerdictChange{View: v, New: true})
		case old != nil && old.Verdict != v.Verdict:
			c.Verdicts = append(c.Verdicts, VerdictChange{View: v, From: old.Verdict})
		}
		// A reload publishes every verdict: the outbox keeps the ones it
		// has, and takes one the clock changed while no commit could.
		if m.cfg.Publish && (m.loading || old == nil || old.Verdict != v.Verdict) {
			c.Published = append(c.Published, Published{Key: r.key, Verdict: v.Verdict, At: now, Shown: ShownOf(v)})
			if m.loading && m.cfg.Progress && v.Verdict == VerdictApplying {
				// The progress a crash lost (bbolt takes it through its log:
				// store.DB's progress); the same as stored is nothing new.
				c.Published = append(c.Published, Published{Key: r.key, Verdict: v.Verdict, At: now, Progress: true, Shown: ShownOf(v)})
			}
		} else if m.cfg.Publish && v.Verdict == VerdictFailed && old.Summary != v.Summary {
			// What the failure says changed (helm-controller stalled): the
			// forge's description is told again, the verdict is not new.
			c.Published = append(c.Published, Published{Key: r.key, Verdict: v.Verdict, At: now, Restate: true, Shown: ShownOf(v)})
		} else if m.cfg.Progress && v.Verdict == VerdictApplying && old.Summary != v.Summary {
			// More layers applied it: a chat message shows how far it got.
			c.Published = append(c.Published, Published{Key: r.key, Verdict: v.Verdict, At: now, Progress: true, Shown: ShownOf(v)})
		}
	}
}

// NextDeadline is when the earliest rollout still applying may turn
// stuck, or zero.
func (m *Model) NextDeadline() time.Time {
	if len(m.due) == 0 {
		return time.Time{}
	}
	return m.due[0].at
}

// Expire re-evaluates the rollouts whose deadline has passed.
func (m *Model) Expire(c *Change, now time.Time) {
	dirty := dirtySet{}
	for len(m.due) > 0 && !m.due[0].at.After(now) {
		d := heap.Pop(&m.due).(deadline)
		if cl := m.clusters[d.key.Cluster]; cl != nil {
			dirty.touch(cl.rollouts[d.key.Hash])
		}
	}
	m.recompute(c, dirty, now)
}

// reread evaluates every rollout of the clusters whose live set lost
// rollouts, as a restart would: what their views read may have gone with
// them, and no evaluation may rest on a rollout no longer in memory. Like
// a restart, it decides no mail but the clock's.
func (m *Model) reread(c *Change, clusters map[*cluster]bool, now time.Time) {
	dirty := dirtySet{}
	for cl := range clusters {
		for _, r := range cl.rollouts {
			dirty.full(r)
		}
	}
	m.loading = true
	m.recompute(c, dirty, now)
	m.loading = false
}

// CollectGarbage forgets rollouts whose last evidence is older than the
// retention, unless some emitter is still at that revision: the current
// revision of a layer is what the next rollout's expected layers come from.
// Settled rollouts past the retention go in the same commit. It returns
// how many live rollouts it forgot.
func (m *Model) CollectGarbage(c *Change, now time.Time) int {
	if m.cfg.Retention <= 0 {
		return 0
	}
	cutoff := now.Add(-m.cfg.Retention)
	c.PurgeBefore = cutoff
	from := len(c.Forget)
	var gone []*rolloutState
	lost := map[*cluster]bool{}
	for _, cl := range m.clusters {
		for _, r := range cl.rollouts {
			if r.last.Before(cutoff) && !cl.isCurrent(r) {
				gone = append(gone, r)
				lost[cl] = true
			}
		}
	}
	for _, r := range gone {
		m.retire(c, r)
	}
	m.forgetMails(c.Forget[from:])
	m.reread(c, lost, now)
	return len(gone)
}

func (c *cluster) isCurrent(r *rolloutState) bool {
	for em := range r.ev {
		if !em.IsRelease() && c.logs[em].latest() == r.key.Hash {
			return true
		}
	}
	return false
}

// deadline is when a rollout still applying turns stuck.
type deadline struct {
	at  time.Time
	key Key
}

// deadlines is a min-heap; entries for rollouts that moved on are dropped
// when they fire.
type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// Retention is Config.Retention.
func (m *Model) Retention() time.Duration { return m.cfg.Retention }
