package environments

import (
	"slices"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// What runs where is read from each cluster's rollouts, newest first, as
// the service already judged them: never a second evaluation. A cluster's
// rollouts are one branch's heads in the order it deployed them, so a
// rollout's commit contains every commit the cluster deployed before it
// (docs/environments.md says where that does not hold).

// History is one cluster's rollouts, newest first (by first evidence),
// the live ones and the latest settled ones.
type History struct {
	Rollouts []*rollout.View
	// Cut says that older rollouts exist that are not in Rollouts.
	Cut bool
}

// States of a cluster, from its newest rollout that is not superseded.
const (
	StateRunning    = "running"    // its newest rollout applied
	StateApplying   = "applying"   // a newer rollout is applying
	StateStuck      = "stuck"      // a newer rollout is stuck
	StateFailed     = "failed"     // a newer rollout failed
	StateUnreported = "unreported" // no rollout known
	StateNone       = "none"       // rollouts, none applied, failed or in flight
)

// Status is what GET /environments answers: each environment in
// promotion order, and what lies between each two adjacent ones of the
// declared order.
type Status struct {
	Environments []Environment `json:"environments"`
	Between      []Between     `json:"between"`
}

// Environment is one environment's clusters and what they run.
type Environment struct {
	Name     string    `json:"name"`
	Clusters []Cluster `json:"clusters"`
	// Running is the commit every cluster of it runs; nil when they
	// differ (Groups says how) or one runs none.
	Running *Deploy `json:"running"`
	// Groups are its clusters by state and running commit: one group when
	// they agree.
	Groups []Group `json:"groups"`
}

// Group is clusters of one environment in the same state on the same
// commit ("" for none).
type Group struct {
	State    string   `json:"state"`
	Commit   string   `json:"commit,omitempty"`
	Clusters []string `json:"clusters"`
}

// Cluster is what one cluster runs.
type Cluster struct {
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	// Running is the newest commit applied on it that no failed or
	// in-flight newer rollout follows; nil otherwise.
	Running *Deploy `json:"running"`
	// LastApplied is the newest commit applied on it, when Running is nil
	// because a newer one failed or is in flight.
	LastApplied *Deploy `json:"last_applied,omitempty"`
	// InFlight are the rollouts newer than the last applied one that are
	// applying or stuck, newest first.
	InFlight []Deploy `json:"in_flight"`
	// LastFailure is its newest failure: a failed rollout, or a layer or
	// release that failed after its rollout applied.
	LastFailure *Failure `json:"last_failure"`
}

// Deploy is one rollout of a commit on a cluster.
type Deploy struct {
	Cluster  string          `json:"cluster"`
	Hash     string          `json:"hash"`   // the rollout's (its page is /ui/<cluster>/<hash>)
	Commit   string          `json:"commit"` // the commit people know it by (an artifact's origin)
	Revision string          `json:"revision"`
	Subject  string          `json:"subject,omitempty"`
	Verdict  rollout.Verdict `json:"verdict"`
	Began    time.Time       `json:"first_seen"`
	// AppliedAt is when it applied: the service's time of its verdict.
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

// Failure is a cluster's last failure.
type Failure struct {
	Deploy
	At           time.Time `json:"at"`
	Layer        string    `json:"layer,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Summary      string    `json:"summary"`
	AfterApplied bool      `json:"after_applied,omitempty"`
}

// Between is what lies between two adjacent environments.
type Between struct {
	Lower  string `json:"lower"`
	Higher string `json:"higher"`
	// Commits are those the lower environment deployed (any verdict but
	// superseded) that some cluster of the higher one has not run, newest
	// first, at most MaxBetween.
	Commits []Pending `json:"commits"`
	// Complete is false when older commits may be missing: the lower
	// environment's histories read did not reach what every cluster of
	// the higher one runs, or the list was cut at MaxBetween.
	Complete bool `json:"complete"`
	// Unknown are the higher environment's clusters with no applied
	// rollout known: what they run is not counted.
	Unknown []string `json:"unknown,omitempty"`
}

// Pending is a commit between two environments, with its rollout on each
// cluster of either that deployed it.
type Pending struct {
	Commit   string  `json:"commit"`
	Revision string  `json:"revision"`
	Subject  string  `json:"subject,omitempty"`
	Where    []Where `json:"where"`
	// NotRunOn are the higher environment's clusters that have not run it.
	NotRunOn []string `json:"not_run_on"`
}

// Where is a commit's rollout on one cluster, in a Pending. It is short:
// a commit between two environments of a hub's hundreds of clusters has a
// Where on each.
type Where struct {
	Cluster string          `json:"cluster"`
	Verdict rollout.Verdict `json:"verdict"`
	// Hash is the rollout's when it is not the commit's (an OCI artifact's
	// digest): its page is /ui/<cluster>/<hash or commit>.
	Hash string `json:"hash,omitempty"`
}

// MaxBetween bounds the commits listed between two environments.
const MaxBetween = 50

// Status reads what runs where: the environments of clusters in m's order,
// each cluster's state from its history (none: it never reported).
func (m *Map) Status(clusters []string, histories map[string]History) Status {
	byEnv := map[string][]string{}
	for _, c := range clusters {
		byEnv[m.Of(c)] = append(byEnv[m.Of(c)], c)
	}
	st := Status{Environments: []Environment{}}
	for _, name := range m.Order(clusters) {
		env := Environment{Name: name}
		members := byEnv[name]
		slices.Sort(members)
		for _, c := range members {
			env.Clusters = append(env.Clusters, clusterOf(c, histories[c].Rollouts))
		}
		env.Running, env.Groups = rollUp(env.Clusters)
		st.Environments = append(st.Environments, env)
	}
	// Promoted environments come first, in their order: each is compared
	// with the next one present.
	for i := 1; i < len(st.Environments) && m.Promoted(st.Environments[i].Name); i++ {
		lower, higher := st.Environments[i-1], st.Environments[i]
		st.Between = append(st.Between, between(lower, higher, histories))
	}
	if st.Between == nil {
		st.Between = []Between{}
	}
	return st
}

func deployOf(v *rollout.View) Deploy {
	d := Deploy{Cluster: v.Cluster, Hash: v.Hash, Commit: v.CommitHash(), Revision: v.Named(), Subject: v.Subject,
		Verdict: v.Verdict, Began: v.FirstSeen}
	if v.Verdict == rollout.VerdictApplied {
		d.AppliedAt = v.CompletedAt
	}
	return d
}

// clusterOf reads one cluster's state from its rollouts, newest first.
func clusterOf(name string, rollouts []*rollout.View) Cluster {
	c := Cluster{Cluster: name, State: StateUnreported, InFlight: []Deploy{}}
	if len(rollouts) > 0 {
		c.State = StateNone
	}
	var applied *rollout.View
	for _, v := range rollouts {
		if c.LastFailure == nil {
			c.LastFailure = failureOf(v)
		}
		if applied != nil {
			if c.LastFailure != nil {
				break
			}
			continue // only an older failure is still looked for
		}
		switch v.Verdict {
		case rollout.VerdictApplying, rollout.VerdictStuck:
			c.InFlight = append(c.InFlight, deployOf(v))
		case rollout.VerdictApplied:
			applied = v
		}
		if c.State == StateNone && v.Verdict != rollout.VerdictSuperseded {
			c.State = stateOf(v.Verdict)
		}
	}
	if applied != nil {
		d := deployOf(applied)
		if c.State == StateRunning {
			c.Running = &d
		} else {
			c.LastApplied = &d
		}
	}
	return c
}

func stateOf(v rollout.Verdict) string {
	switch v {
	case rollout.VerdictApplied:
		return StateRunning
	case rollout.VerdictApplying:
		return StateApplying
	case rollout.VerdictStuck:
		return StateStuck
	case rollout.VerdictFailed:
		return StateFailed
	}
	return StateNone
}

// failureOf is v's newest failure: its own, when it failed, or one after
// it applied; nil when none.
func failureOf(v *rollout.View) *Failure {
	var last *rollout.FailureView
	for i := range v.Failures {
		f := &v.Failures[i]
		if (v.Verdict == rollout.VerdictFailed || f.AfterApplied) && (last == nil || f.LastAt.After(last.LastAt)) {
			last = f
		}
	}
	switch {
	case last != nil:
		return &Failure{Deploy: deployOf(v), At: last.LastAt, Layer: last.Layer, Reason: last.Reason, Summary: v.Summary, AfterApplied: last.AfterApplied}
	case v.Verdict == rollout.VerdictFailed:
		at := v.LastSeen
		if v.CompletedAt != nil {
			at = *v.CompletedAt
		}
		return &Failure{Deploy: deployOf(v), At: at, Summary: v.Summary}
	}
	return nil
}

// rollUp is the commit every cluster runs, or the groups they split into.
func rollUp(clusters []Cluster) (*Deploy, []Group) {
	var groups []Group
	for _, c := range clusters {
		g := Group{State: c.State}
		if c.Running != nil {
			g.Commit = c.Running.Commit
		}
		i := slices.IndexFunc(groups, func(o Group) bool { return o.State == g.State && o.Commit == g.Commit })
		if i < 0 {
			groups = append(groups, g)
			i = len(groups) - 1
		}
		groups[i].Clusters = append(groups[i].Clusters, c.Cluster)
	}
	if len(groups) != 1 || groups[0].State != StateRunning {
		return nil, groups
	}
	// Running everywhere since the last of them applied it.
	var running Deploy
	for _, c := range clusters {
		if running.AppliedAt == nil || c.Running.AppliedAt != nil && c.Running.AppliedAt.After(*running.AppliedAt) {
			running = *c.Running
		}
	}
	running.Cluster, running.Hash = "", ""
	return &running, groups
}

// between lists what the lower environment deployed that some cluster of
// the higher one has not run. A higher cluster has run a commit when it
// applied it or a commit a lower cluster deployed after it (which
// contains it): so a commit it skipped, deployed inside a later one, is
// counted as run.
func between(lower, higher Environment, histories map[string]History) Between {
	b := Between{Lower: lower.Name, Higher: higher.Name, Commits: []Pending{}, Complete: true}
	// appliedBy is, for each commit, the higher clusters that applied it,
	// as bits of their index in counted.
	var counted []string
	for _, c := range higher.Clusters {
		if c.Running == nil && c.LastApplied == nil {
			b.Unknown = append(b.Unknown, c.Cluster)
			continue
		}
		counted = append(counted, c.Cluster)
	}
	all := newBits(len(counted))
	for i := range counted {
		all.set(i)
	}
	appliedBy := map[string]bits{}
	for i, c := range counted {
		for _, v := range histories[c].Rollouts {
			if v.Verdict == rollout.VerdictApplied {
				bs, ok := appliedBy[v.CommitHash()]
				if !ok {
					bs = newBits(len(counted))
					appliedBy[v.CommitHash()] = bs
				}
				bs.set(i)
			}
		}
	}
	// runBy is, for each commit the lower environment deployed, the
	// higher clusters that ran it by some lower cluster's order.
	runBy := map[string]bits{}
	var order []*rollout.View // the lower rollouts listed, one per commit: the newest
	at := map[string]int{}    // a commit's place in order
	for _, c := range lower.Clusters {
		h := histories[c.Cluster]
		seen := newBits(len(counted))
		reached := false
		for _, v := range h.Rollouts {
			commit := v.CommitHash()
			seen.or(appliedBy[commit])
			if v.Verdict == rollout.VerdictSuperseded {
				continue
			}
			if seen.equal(all) && len(counted) > 0 {
				reached = true
				break // it and every older one ran everywhere
			}
			r, ok := runBy[commit]
			if !ok {
				r = newBits(len(counted))
				runBy[commit] = r
				at[commit] = len(order)
				order = append(order, v)
			} else if i := at[commit]; v.FirstSeen.After(order[i].FirstSeen) {
				order[i] = v
			}
			r.or(seen)
		}
		if !reached && h.Cut {
			b.Complete = false
		}
	}
	slices.SortStableFunc(order, func(x, y *rollout.View) int { return y.FirstSeen.Compare(x.FirstSeen) })
	listed := map[string]*Pending{}
	for _, v := range order {
		commit := v.CommitHash()
		r := runBy[commit]
		if len(counted) > 0 && r.equal(all) {
			continue
		}
		if len(b.Commits) == MaxBetween {
			b.Complete = false
			break
		}
		p := Pending{Commit: commit, Revision: v.Named(), Subject: v.Subject, Where: []Where{}, NotRunOn: []string{}}
		for i, c := range counted {
			if !r.has(i) {
				p.NotRunOn = append(p.NotRunOn, c)
			}
		}
		p.NotRunOn = append(p.NotRunOn, b.Unknown...)
		b.Commits = append(b.Commits, p)
	}
	for i := range b.Commits {
		listed[b.Commits[i].Commit] = &b.Commits[i]
	}
	// Where each commit listed was deployed, on either environment.
	for _, env := range []Environment{lower, higher} {
		for _, c := range env.Clusters {
			for _, v := range histories[c.Cluster].Rollouts {
				if p := listed[v.CommitHash()]; p != nil && v.Verdict != rollout.VerdictSuperseded {
					where := Where{Cluster: v.Cluster, Verdict: v.Verdict}
					if v.Hash != p.Commit {
						where.Hash = v.Hash
					}
					p.Where = append(p.Where, where)
				}
			}
		}
	}
	for _, p := range b.Commits {
		slices.SortFunc(p.Where, compareWhere)
	}
	return b
}

// compareWhere orders where a commit was deployed: by cluster (a commit
// has one rollout a cluster but for an artifact rebuilt), then by hash.
func compareWhere(x, y Where) int {
	if c := strings.Compare(x.Cluster, y.Cluster); c != 0 {
		return c
	}
	return strings.Compare(x.Hash, y.Hash)
}

// bits is a set of small integers.
type bits []uint64

func newBits(n int) bits      { return make(bits, (n+63)/64) }
func (b bits) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bits) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bits) or(o bits) {
	for i := range o {
		b[i] |= o[i]
	}
}
func (b bits) equal(o bits) bool { return slices.Equal(b, o) }
