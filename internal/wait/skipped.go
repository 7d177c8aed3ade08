package wait

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ancestry"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// A commit followed by another within source-controller's interval is never
// fetched on its own: it deploys inside the later one. These types find,
// for a commit a cluster has no rollout of, the earliest later rollout whose
// commit contains it, asking git (never guessing by time).

// gitSide is the pipeline's repository and the commit waited on in it,
// opened once, when the first cluster needs them, for all of them.
type gitSide struct {
	path, dir, rev string
	progress       *lines

	once   sync.Once
	repo   *ancestry.Repo
	commit ancestry.Commit
	err    error // why git cannot answer
}

func (g *gitSide) open(ctx context.Context) error {
	g.once.Do(func() {
		hash, _, _ := flux.ParseQuery(g.rev) // checked when the flags were read
		g.repo, g.err = ancestry.Open(ctx, g.path, g.dir)
		if g.err == nil {
			g.commit, g.err = g.repo.Commit(ctx, hash)
		}
		if g.err != nil {
			g.progress.printf("%s: git cannot tell whether a later revision contains it (%v): waiting for %s itself", flux.Short(hash), g.err, flux.Short(hash))
		}
	})
	return g.err
}

// descendants looks through one cluster's rollouts for a commit's earliest
// deployed descendant.
type descendants struct {
	git *gitSide
	w   *waiter
	// What the last look found, for saying why the commit is still unknown.
	looked             bool
	checked, unfetched int
	since              time.Time
	lastErr            error
	cut                bool // more rollouts since then than one look reads
	listed             int  // rollouts since then, of which git was asked about the oldest
}

// MaxCandidates bounds the rollouts one look asks git about, the oldest
// first, and one page of the list; MaxPages bounds the pages one look
// reads (README, "Limits known today").
const (
	MaxCandidates = 1000
	MaxPages      = 10
)

// find returns the rollout of the earliest commit on the cluster that
// contains the commit waited on, or nil when none does (yet).
func (d *descendants) find(ctx context.Context) (*rollout.View, error) {
	d.looked = true
	if d.git.open(ctx) != nil {
		return nil, nil
	}
	commit := d.git.commit
	d.since = commit.Time.Add(-ancestry.Skew)
	views, cut, err := d.w.rollouts(ctx, d.since)
	if err != nil {
		return nil, err
	}
	d.cut = cut
	if cut {
		// The oldest, which would be the first to contain it, are the
		// ones not read: a later one found would be the wrong answer.
		return nil, nil
	}
	// Oldest first: the first rollout to contain the commit is the one
	// that deployed it.
	slices.SortStableFunc(views, func(a, b *rollout.View) int { return a.FirstSeen.Compare(b.FirstSeen) })
	d.checked, d.unfetched, d.lastErr, d.listed = 0, 0, nil, len(views)
	for _, v := range views[:min(len(views), MaxCandidates)] {
		hash := v.Commit // "" for an artifact's digest: no repository holds it
		if hash == "" || hash == commit.Hash {
			continue
		}
		d.checked++
		yes, err := d.git.repo.Contains(ctx, hash, commit)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			d.unfetched++
			d.lastErr = err
			continue
		}
		if yes {
			return v, nil
		}
	}
	return nil, nil
}

// why says why the commit is still unknown on the cluster after the looks;
// "" before any (and with --no-ancestry: d is nil).
func (d *descendants) why() string {
	switch {
	case d == nil || !d.looked:
		return ""
	case d.git.err != nil:
		return fmt.Sprintf("git could not tell whether a later revision contains it: %v", d.git.err)
	case d.cut:
		return fmt.Sprintf("more than %d rollouts since %s, too many to look through for one that contains it",
			MaxPages*MaxCandidates, d.since.Format(time.RFC3339))
	case d.unfetched > 0:
		return fmt.Sprintf("no deployed revision contains it: %d rollouts since %s checked, %d of them not in this repository (%v)",
			d.checked, d.since.Format(time.RFC3339), d.unfetched, d.lastErr)
	}
	msg := fmt.Sprintf("no deployed revision contains it: %d rollouts since %s checked", d.checked, d.since.Format(time.RFC3339))
	if d.listed > MaxCandidates {
		msg += fmt.Sprintf(", the oldest %d of %d", MaxCandidates, d.listed)
	}
	return msg
}

// rollouts lists the waiter's cluster's rollouts that began at since or
// later, page after page; cut reports that there were more than MaxPages.
func (w *waiter) rollouts(ctx context.Context, since time.Time) (views []*rollout.View, cut bool, err error) {
	q := url.Values{"since": {since.UTC().Format(time.RFC3339)}, "limit": {fmt.Sprint(MaxCandidates)}, "layers": {"none"}}
	if w.cluster != "" {
		q.Set("cluster", w.cluster)
	}
	for range MaxPages {
		var body api.RolloutsResponse
		status, err := w.getJSON(ctx, w.base+"/rollouts?"+q.Encode(), 64<<20, &body)
		switch {
		case err != nil:
			return nil, false, fmt.Errorf("list rollouts: %w", err)
		case status != http.StatusOK:
			return nil, false, fmt.Errorf("list rollouts: %d from the service", status)
		}
		views = append(views, body.Rollouts...)
		if body.Next == "" {
			return views, false, nil
		}
		q.Set("after", body.Next)
	}
	return views, true, nil
}
