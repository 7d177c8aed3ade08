package rollout

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// A simulated Flux: sources that commits are pushed to, Kustomizations
// (layers) that apply them in dependsOn order, HelmReleases inside some,
// and notification-controller between them and the service. It produces
// what the service would be given (observations, at the time each
// arrives) together with the ground truth: which commit each layer ran,
// when, and each failure. The oracle (oracle_test.go) checks the model's
// verdicts against it.
//
// What it models, from ../shared/docs/flux-events.md and the captures:
// - kustomize-controller reconciles a layer when its source's artifact
//   changes and every interval; a layer whose dependencies are not ready
//   at the artifact says DependencyNotReady with the new revision and
//   retries; an apply says Progressing (naming the HelmReleases it changed),
//   then checks health (the release's action inside it, with wait), then
//   says ReconciliationSucceeded or one failure; a prune failure keeps the
//   layer on its old revision and is retried. By default it finishes a
//   health check before a newer revision (the cancel gate: it cancels);
//   a heartbeat repeats the success every interval.
// - helm-controller acts on a release when its layer's apply changed it,
//   within the layer's health check, and says UpgradeSucceeded or
//   UpgradeFailed.
// - notification-controller drops identical events (object, message,
//   revision) within 5 minutes, posts each event on its own after up to
//   15 s of retries (so out of order), twice when two Alerts match, and
//   drops what it cannot deliver (lost, and outages).
// - commits are pushed faster than the layers reconcile; layers are
//   suspended (they then send nothing).

type simConfig struct {
	sources    int     // GitRepositories, each with its own layers
	layers     int     // layers per source, a dependsOn chain with branches
	commits    int     // commits per source
	sourceEvts bool    // the Alert includes the GitRepositories
	cancelGate bool    // CancelHealthCheckOnNewRevision
	drop       float64 // probability an event is lost
	outage     bool    // notification-controller down for a while
	dup        float64 // probability an event is posted twice
	suspend    bool    // one layer suspended mid-stream
	releases   bool    // HelmReleases inside some layers
	fresh      bool    // no baseline commit every layer reported
	cluster    bool    // the cluster reader's stand-in marks which layers must apply each commit
}

// randomSimConfig draws a history's shape. Every third history loses
// events (drops, an outage): the oracle then checks the safety properties
// only.
func randomSimConfig(r *rand.Rand) simConfig {
	c := simConfig{
		sources:    1 + r.IntN(2),
		layers:     2 + r.IntN(4),
		commits:    2 + r.IntN(6),
		sourceEvts: r.IntN(2) == 0,
		cancelGate: r.IntN(4) == 0,
		dup:        []float64{0, 0.1, 0.3}[r.IntN(3)],
		suspend:    r.IntN(5) == 0,
		releases:   r.IntN(2) == 0,
		fresh:      r.IntN(10) == 0,
		cluster:    r.IntN(3) == 0,
	}
	if r.IntN(3) == 0 {
		c.drop = []float64{0.05, 0.2, 0.5}[r.IntN(3)]
		c.outage = r.IntN(2) == 0
	}
	return c
}

// lossless reports whether every event Flux sends reaches the service.
func (c simConfig) lossless() bool { return c.drop == 0 && !c.outage }

type simLayer struct {
	src     int
	name    string
	deps    []int  // indexes in the source's layers
	release string // the HelmRelease it applies, "" when none
	// state
	applied   int  // last applied commit (index), -1 none
	ready     bool // its last reconciliation succeeded
	busy      bool // applying or checking health
	busyUntil int
	busyOn    int // the commit it works on
	outcome   string
	next      int  // its next reconciliation, in seconds
	suspend   bool // told to suspend: it does once its reconciliation ends
	suspended bool
	lastHB    int // its last heartbeat
}

type simCommit struct {
	src    int
	label  string
	hash   string
	pushed int
	// fate of the commit per layer: "" applies cleanly, else a failure
	// reason; transient failures succeed on the retry.
	fails     map[int]string
	transient map[int]bool
	// the HelmReleases it changes (by layer) and whether each fails
	changes     map[int]bool
	releaseFail map[int]bool
}

// simEvent is one event Flux sent, with when it reaches the service.
type simEvent struct {
	obs     Observation
	arrives time.Time
	order   int // a tiebreak for arrival in the same instant
	group   int // the reader's marks of one commit come in one batch (0: none)
}

// truth is what really happened, by commit label.
type truth struct {
	ran    map[string]map[string]time.Time // commit -> layer -> its success (the release's included)
	failed map[string]map[string]time.Time // commit -> layer -> its first failure
	sent   map[string][]Observation        // commit -> what Flux sent about it, delivered or not
}

type fluxSim struct {
	cfg     simConfig
	r       *rand.Rand
	t0      time.Time
	layers  []*simLayer
	commits []*simCommit
	art     []int // each source's current artifact (commit index), -1 none
	events  []simEvent
	limit   map[string]int // notification-controller's rate limit: key -> until (s)
	outage  [2]int
	truth   truth
	now     int
	// the suspended layer (-1: none), and when the cluster said so
	suspended, suspendAt int
}

const simCluster = "prod"

func simHash(label string) string {
	s := sha1.Sum([]byte("fluxsim/" + label))
	return hex.EncodeToString(s[:])
}

func newFluxSim(cfg simConfig, r *rand.Rand, t0 time.Time) *fluxSim {
	s := &fluxSim{cfg: cfg, r: r, t0: t0, limit: map[string]int{}, suspended: -1, suspendAt: -1,
		truth: truth{ran: map[string]map[string]time.Time{}, failed: map[string]map[string]time.Time{}, sent: map[string][]Observation{}}}
	names := []string{"infra", "platform", "apps", "tenants", "edge", "monitoring"}
	for src := range cfg.sources {
		base := len(s.layers)
		for i := range cfg.layers {
			l := &simLayer{src: src, name: fmt.Sprintf("%s-%d", names[i%len(names)], src), applied: -1}
			if i > 0 {
				// A chain, with a branch now and then: each depends on
				// one of the layers before it.
				l.deps = []int{base + r.IntN(i)}
			}
			if cfg.releases && i > 0 && r.IntN(2) == 0 {
				l.release = "web-" + l.name
			}
			l.next = r.IntN(30)
			s.layers = append(s.layers, l)
		}
		s.art = append(s.art, -1)
	}
	if cfg.outage {
		from := 60 + r.IntN(300)
		s.outage = [2]int{from, from + 30 + r.IntN(120)}
	}
	return s
}

// run pushes the commits and moves the cluster on, a second a step, until
// 15 minutes after the last push.
func (s *fluxSim) run() {
	var pushes []*simCommit
	if !s.cfg.fresh {
		// The baseline every layer applied before the stream begins:
		// events alone know the layers from it.
		for src := range s.cfg.sources {
			pushes = append(pushes, s.newCommit(src, 0))
		}
	}
	for src := range s.cfg.sources {
		at := 120
		if s.cfg.fresh {
			at = 0
		}
		for range s.cfg.commits {
			pushes = append(pushes, s.newCommit(src, at))
			// Commits come faster than the layers reconcile, or slower.
			at += 3 + s.r.IntN(90)
		}
	}
	slices.SortStableFunc(pushes, func(a, b *simCommit) int { return a.pushed - b.pushed })
	end := pushes[len(pushes)-1].pushed + 900
	if s.cfg.suspend {
		s.suspendAt, s.suspended = 60+s.r.IntN(end/2), s.r.IntN(len(s.layers))
	}
	for s.now = 0; s.now <= end; s.now++ {
		for len(pushes) > 0 && pushes[0].pushed == s.now {
			c := pushes[0]
			pushes = pushes[1:]
			c.pushed = s.now
			s.commits = append(s.commits, c)
			s.art[c.src] = len(s.commits) - 1
			if s.cfg.cluster {
				s.marks(c)
			}
			if s.cfg.sourceEvts {
				s.emit(Observation{Emitter: Emitter{Role: RoleSource, Kind: "GitRepository", Namespace: "flux-system", Name: fmt.Sprintf("repo-%d", c.src)},
					Signal: SignalArtifact, Reason: "NewArtifact", Message: "stored artifact for commit '" + c.label + "'", Subject: c.label}, c)
			}
			// kustomize-controller watches the source: every layer on it
			// reconciles at once.
			for _, l := range s.layers {
				if l.src == c.src && !l.busy {
					l.next = s.now
				}
			}
		}
		if s.now == s.suspendAt {
			l := s.layers[s.suspended]
			l.suspend = true
			if a := s.art[l.src]; s.cfg.cluster && a >= 0 {
				s.marks(s.commits[a])
			}
		}
		for i := range s.layers {
			s.step(i)
		}
	}
}

// marks are what the cluster reader says when c is its source's current
// artifact, or when a layer on it is suspended: which layers must apply
// it, each with its dependencies, all in one batch, lost never.
func (s *fluxSim) marks(c *simCommit) {
	at := s.t0.Add(time.Duration(s.now) * time.Second)
	arrives := at.Add(time.Duration(s.r.IntN(2000)) * time.Millisecond)
	group := len(s.events) + 1
	for _, l := range s.layers {
		if l.src != c.src {
			continue
		}
		o := Observation{Cluster: simCluster, Emitter: Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: l.name},
			Revision: "main@sha1:" + c.hash, Hash: c.hash, At: at, Signal: SignalExpected}
		if l.suspend {
			o.Signal = SignalSuspended
		}
		for _, d := range l.deps {
			o.DependsOn = append(o.DependsOn, "flux-system/"+s.layers[d].name)
		}
		s.events = append(s.events, simEvent{obs: o, arrives: arrives, order: len(s.events), group: group})
	}
}

// excluded reports whether, with the cluster reader, layer i is not
// expected to run c: the cluster said it was suspended while c was its
// source's current artifact (or before), and it had not run c nor failed
// it.
func (s *fluxSim) excluded(i int, c *simCommit) bool {
	if !s.cfg.cluster || i != s.suspended {
		return false
	}
	if _, ran := s.truth.ran[c.label][s.layers[i].name]; ran {
		return false
	}
	if _, failed := s.truth.failed[c.label][s.layers[i].name]; failed {
		return false
	}
	for _, n := range s.commits {
		if n.src == c.src && n.pushed > c.pushed {
			return s.suspendAt < n.pushed
		}
	}
	return true
}

// newCommit is a commit of source src to be pushed at second at, with its
// fate on each layer drawn now.
func (s *fluxSim) newCommit(src, at int) *simCommit {
	label := fmt.Sprintf("s%d-c%d-%d", src, at, s.r.IntN(1000))
	c := &simCommit{src: src, label: label, hash: simHash(label), pushed: at,
		fails: map[int]string{}, transient: map[int]bool{}, changes: map[int]bool{}, releaseFail: map[int]bool{}}
	baseline := !s.cfg.fresh && at == 0
	for i, l := range s.layers {
		if l.src != src || baseline {
			if l.src == src && l.release != "" {
				c.changes[i] = true
			}
			continue
		}
		switch s.r.IntN(12) {
		case 0:
			c.fails[i] = "HealthCheckFailed"
		case 1:
			c.fails[i], c.transient[i] = "PruneFailed", s.r.IntN(2) == 0
		case 2:
			c.fails[i], c.transient[i] = "ReconciliationFailed", true
		}
		if l.release != "" && s.r.IntN(2) == 0 {
			c.changes[i] = true
			c.releaseFail[i] = s.r.IntN(6) == 0
		}
	}
	return c
}

// step moves one layer on at the current second.
func (s *fluxSim) step(i int) {
	l := s.layers[i]
	if l.suspend && !l.busy {
		l.suspended = true
	}
	if l.suspended {
		return
	}
	if l.busy {
		target := s.art[l.src]
		if s.cfg.cancelGate && l.outcome == "" && target != l.busyOn && s.now < l.busyUntil {
			// A newer revision cancels the health check.
			s.layerEvent(i, l.busyOn, SignalCanceled, "HealthCheckCanceled", "Health checks canceled due to new reconciliation triggered by GitRepository/flux-system/repo", nil)
			l.busy, l.ready, l.next = false, false, s.now
			return
		}
		if s.now < l.busyUntil {
			return
		}
		s.finish(i)
		return
	}
	if s.now < l.next {
		return
	}
	target := s.art[l.src]
	if target < 0 {
		l.next = s.now + 60
		return
	}
	if target == l.applied && l.ready {
		// A heartbeat: the same success, every interval.
		if s.now-l.lastHB >= 300 {
			l.lastHB = s.now
			s.layerEvent(i, l.applied, SignalSucceeded, "ReconciliationSucceeded", fmt.Sprintf("Reconciliation finished in %dms, next run in 5m0s", 50+s.r.IntN(900)), nil)
		}
		l.next = s.now + 60
		return
	}
	for _, d := range l.deps {
		dl := s.layers[d]
		if dl.applied != target || !dl.ready {
			s.layerEvent(i, target, SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 10s", nil)
			l.next = s.now + 10
			return
		}
	}
	c := s.commits[target]
	holds := []Emitter(nil)
	if c.changes[i] {
		holds = []Emitter{s.release(l)}
	}
	if reason := c.fails[i]; reason == "ReconciliationFailed" && !s.retried(i, target) {
		s.layerEvent(i, target, SignalFailed, reason, "Deployment/apps/web dry-run failed: the server could not find the requested resource", nil)
		l.ready, l.next = false, s.now+30
		return
	}
	s.layerEvent(i, target, SignalProgressing, "Progressing", "ConfigMap/"+l.name+"/settings configured", holds)
	l.busy, l.busyOn, l.outcome = true, target, ""
	l.busyUntil = s.now + 1 + s.r.IntN(20)
}

// finish ends a layer's apply: its release's action, then its health
// check's outcome.
func (s *fluxSim) finish(i int) {
	l := s.layers[i]
	c := s.commits[l.busyOn]
	l.busy = false
	if c.changes[i] {
		rel := s.release(l)
		o := Observation{Emitter: rel, Signal: SignalSucceeded, Reason: "UpgradeSucceeded",
			Message: fmt.Sprintf("Helm upgrade succeeded for release apps/%s.v%d with chart web@1.0.0", rel.Name, l.busyOn+2)}
		if c.releaseFail[i] {
			o.Signal, o.Reason, o.Class = SignalFailed, "UpgradeFailed", FailureRelease
			o.Message = fmt.Sprintf("Helm upgrade failed for release apps/%s with chart web@1.0.0: context deadline exceeded", rel.Name)
		}
		s.emit(o, c)
		if c.releaseFail[i] {
			// With wait, kustomize-controller's health check fails with it.
			s.layerEvent(i, l.busyOn, SignalFailed, "HealthCheckFailed", "health check failed after 5m0s: timeout waiting for: [HelmRelease/apps/"+rel.Name+" status: 'Failed']", nil)
			l.ready, l.next = false, s.now+60
			return
		}
	}
	switch reason := c.fails[i]; {
	case reason == "HealthCheckFailed":
		l.applied = l.busyOn // its objects are applied, unhealthy
		s.layerEvent(i, l.busyOn, SignalFailed, reason, "health check failed after 30s: timeout waiting for: [Deployment/"+l.name+"/web status: 'InProgress']", nil)
		l.ready, l.next = false, s.now+60
		// It stays failed: a later commit moves it on.
		c.fails[i] = "HealthCheckFailed-stays"
	case reason == "HealthCheckFailed-stays":
		s.layerEvent(i, l.busyOn, SignalFailed, "HealthCheckFailed", "health check failed after 30s: timeout waiting for: [Deployment/"+l.name+"/web status: 'InProgress']", nil)
		l.ready, l.next = false, s.now+60
	case reason == "PruneFailed" && !(c.transient[i] && s.retried(i, l.busyOn)):
		s.layerEvent(i, l.busyOn, SignalFailed, reason, "delete failed, errors: ConfigMap/"+l.name+"/old delete failed: forbidden;", nil)
		l.ready, l.next = false, s.now+60
	default:
		l.applied, l.ready, l.lastHB = l.busyOn, true, s.now
		s.layerEvent(i, l.busyOn, SignalProgressing, "Progressing", "Health check passed in 2.1s", nil)
		s.layerEvent(i, l.busyOn, SignalSucceeded, "ReconciliationSucceeded", fmt.Sprintf("Reconciliation finished in %dms, next run in 5m0s", 50+s.r.IntN(900)), nil)
		l.next = s.now + 60
	}
}

func (s *fluxSim) retried(i, commit int) bool {
	return s.truth.failed[s.commits[commit].label][s.layers[i].name] != time.Time{}
}

func (s *fluxSim) release(l *simLayer) Emitter {
	return Emitter{Role: RoleRelease, Kind: "HelmRelease", Namespace: "apps", Name: l.release}
}

func (s *fluxSim) layerEvent(i, commit int, sig Signal, reason, msg string, holds []Emitter) {
	l := s.layers[i]
	o := Observation{Emitter: Emitter{Role: RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: l.name},
		Signal: sig, Reason: reason, Message: msg, Holds: holds}
	if sig == SignalFailed {
		o.Class = map[string]FailureClass{"HealthCheckFailed": FailureHealth, "PruneFailed": FailurePrune, "ReconciliationFailed": FailureApply}[reason]
	}
	if reason == "PruneFailed" {
		o.Objects = []Object{{Kind: "ConfigMap", Namespace: l.name, Name: "old", Error: "forbidden"}}
	}
	s.emit(o, s.commits[commit])
}

// emit is an event Flux sends about commit c now: the truth records it,
// notification-controller rate-limits, delays, doubles or loses it.
func (s *fluxSim) emit(o Observation, c *simCommit) {
	at := s.t0.Add(time.Duration(s.now) * time.Second)
	o.Cluster, o.At = simCluster, at
	if !o.Emitter.IsRelease() {
		o.Revision, o.Hash = "main@sha1:"+c.hash, c.hash
	}
	key := o.Emitter.String() + "\x00" + o.Message + "\x00" + c.hash
	if until, ok := s.limit[key]; ok && s.now < until {
		return // notification-controller drops an identical event for 5 minutes
	}
	s.limit[key] = s.now + 300
	s.record(o, c)
	if s.cfg.outage && s.now >= s.outage[0] && s.now < s.outage[1] || s.r.Float64() < s.cfg.drop {
		return
	}
	n := 1
	if s.r.Float64() < s.cfg.dup {
		n = 2
	}
	for range n {
		delay := time.Duration(s.r.IntN(1000)) * time.Millisecond
		if s.r.IntN(5) == 0 {
			delay += time.Duration(2+s.r.IntN(13)) * time.Second // retried
		}
		if o.Emitter.IsRelease() {
			// A release's report is attributed to the apply it follows
			// when it arrives (docs/verdicts.md, "What events cannot
			// tell"): it is sent after its layer's report of the apply
			// reached the service, as helm-controller acts after it.
			delay += 16 * time.Second
		}
		s.events = append(s.events, simEvent{obs: o, arrives: at.Add(delay), order: len(s.events)})
	}
}

// record keeps the truth: what the layer ran and what failed.
func (s *fluxSim) record(o Observation, c *simCommit) {
	s.truth.sent[c.label] = append(s.truth.sent[c.label], o)
	layer := o.Emitter.Name
	if o.Emitter.IsRelease() {
		for _, l := range s.layers {
			if s.release(l) == o.Emitter {
				layer = l.name
			}
		}
	}
	switch o.Signal {
	case SignalSucceeded:
		if o.Emitter.IsLayer() {
			firstAt(s.truth.ran, c.label, layer, o.At)
		}
	case SignalFailed:
		firstAt(s.truth.failed, c.label, layer, o.At)
	}
}

// firstAt records at under commit and layer unless an earlier time is.
func firstAt(m map[string]map[string]time.Time, commit, layer string, at time.Time) {
	byLayer := m[commit]
	if byLayer == nil {
		byLayer = map[string]time.Time{}
		m[commit] = byLayer
	}
	if _, ok := byLayer[layer]; !ok {
		byLayer[layer] = at
	}
}

// arrivals are the events in the order they reach the service.
func (s *fluxSim) arrivals() []simEvent {
	out := slices.Clone(s.events)
	slices.SortFunc(out, func(a, b simEvent) int {
		if c := a.arrives.Compare(b.arrives); c != 0 {
			return c
		}
		return a.order - b.order
	})
	return out
}
