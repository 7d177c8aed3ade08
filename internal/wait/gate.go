package wait

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The promotion gate (--promote-from): once the commit, or the rollout
// it went out in, applied on a cluster of the lower environment, it must
// stay there for the soak time with no failure after it: a layer or
// release of its rollout failing after it applied, or a newer rollout on
// the cluster failing or getting stuck. The soak is counted from the
// service's applied time, so a pipeline that starts late does not wait
// again, and a failure is one by its time, whenever the gate asks.

// Soak is how a soak stands.
type Soak int

const (
	SoakRunning Soak = iota // not over yet, nothing failed
	SoakMet                 // over, nothing failed within it
	SoakFailed              // something failed within it
)

// SoakOf judges one cluster's soak at now: deployed is the applied
// rollout the commit went out in, since the cluster's rollouts that began
// at its start or later (any order). It returns when the soak ends, and
// what failed within it.
func SoakOf(deployed *rollout.View, since []*rollout.View, soak time.Duration, now time.Time) (s Soak, ends time.Time, failure string) {
	applied := deployed.FirstSeen
	if deployed.CompletedAt != nil {
		applied = *deployed.CompletedAt
	}
	ends = applied.Add(soak)
	within := func(t time.Time) bool { return !t.Before(applied) && !t.After(ends) }
	var first time.Time // the earliest failure within the soak
	for _, f := range deployed.Failures {
		if f.AfterApplied && within(f.At) && (failure == "" || f.At.Before(first)) {
			first = f.At
			failure = fmt.Sprintf("%s failed after it applied: %s at %s", f.Layer, f.Reason, f.At.UTC().Format(time.RFC3339))
		}
	}
	for _, v := range since {
		if v.Key() == deployed.Key() || !v.FirstSeen.After(deployed.FirstSeen) {
			continue
		}
		var at time.Time
		switch {
		case v.Verdict == rollout.VerdictFailed:
			at = failedAt(v)
		case v.Verdict == rollout.VerdictStuck:
			at = v.Deadline
		default:
			continue
		}
		if within(at) && (failure == "" || at.Before(first)) {
			first = at
			failure = fmt.Sprintf("a newer rollout, %s, %s at %s: %s", flux.Short(v.CommitHash()), v.Verdict, at.UTC().Format(time.RFC3339), v.Summary)
		}
	}
	switch {
	case failure != "":
		return SoakFailed, ends, failure
	case now.Before(ends):
		return SoakRunning, ends, ""
	}
	return SoakMet, ends, ""
}

// failedAt is when a failed rollout failed: its deciding failure's time
// (a failed rollout need not have completed).
func failedAt(v *rollout.View) time.Time {
	switch f := v.DecidingFailure(); {
	case f != nil:
		return f.At
	case v.CompletedAt != nil:
		return *v.CompletedAt
	}
	return v.LastSeen
}

// soakChecks bounds the time between two looks at a soak under way.
const soakChecks = 30 * time.Second

// soak waits, once the commit applied on w's cluster (w.last), until its
// soak is met, something fails within it, or the deadline passes.
func (w *waiter) soak(ctx context.Context, soak time.Duration, deadline time.Time, out io.Writer) error {
	deployed := w.last
	for {
		// The rollout again: a failure after it applied is in its view.
		q := url.Values{"rev": {deployed.Hash}}
		if w.cluster != "" {
			q.Set("cluster", w.cluster)
		}
		v, status, err := w.get(ctx, w.base+"/verdict?"+q.Encode())
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("%d from the service", status)
		}
		var since []*rollout.View
		if err == nil {
			deployed = v
			var cut bool
			if since, cut, err = w.rollouts(ctx, deployed.FirstSeen); err == nil && cut {
				err = fmt.Errorf("more than %d rollouts since it began: too many to look through", MaxPages*MaxCandidates)
			}
		}
		if err != nil {
			fmt.Fprintln(w.stderr, "wait: soak:", err)
			return Trouble
		}
		s, ends, failure := SoakOf(deployed.View, since, soak, time.Now())
		w.soakEnds, w.soakFailure = &ends, failure
		switch s {
		case SoakFailed:
			fmt.Fprintf(out, "soak failed on %s: %s\n", deployed.Cluster, failure)
			return Failed
		case SoakMet:
			fmt.Fprintf(out, "soak of %s met on %s: applied %s, nothing failed until %s\n", soak, deployed.Cluster,
				deployed.CompletedAt.UTC().Format(time.RFC3339), ends.UTC().Format(time.RFC3339))
			return nil
		}
		if !time.Now().Before(deadline) {
			fmt.Fprintf(out, "soak of %s on %s not over: it ends at %s\ntimed out\n", soak, deployed.Cluster, ends.UTC().Format(time.RFC3339))
			return Timeout
		}
		w.progress.printf("%s on %s: soaking until %s", flux.Short(deployed.CommitHash()), deployed.Cluster, ends.UTC().Format(time.RFC3339))
		next := min(time.Until(ends), time.Until(deadline), soakChecks)
		select {
		case <-ctx.Done():
			return Trouble
		case <-time.After(max(next, 0)):
		}
	}
}

// EnvironmentClusters asks the service (GET /environments) for the
// clusters of an environment.
func EnvironmentClusters(ctx context.Context, base, token, env string) ([]string, error) {
	w := &waiter{token: token, client: &http.Client{Timeout: 30 * time.Second}}
	var body api.EnvironmentsResponse
	status, err := w.getJSON(ctx, strings.TrimRight(base, "/")+"/environments", 64<<20, &body)
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusUnauthorized:
		return nil, fmt.Errorf("the service wants a verdict token (--token-file)")
	case status != http.StatusOK:
		return nil, fmt.Errorf("environments: %d from the service", status)
	}
	var names []string
	for _, e := range body.Environments {
		if e.Name != env {
			names = append(names, e.Name)
			continue
		}
		var out []string
		for _, c := range e.Clusters {
			out = append(out, c.Cluster)
		}
		if len(out) == 0 {
			// Never a gate passed on no cluster at all.
			return nil, fmt.Errorf("environment %s has no cluster", env)
		}
		return out, nil
	}
	slices.Sort(names)
	return nil, fmt.Errorf("no environment %s (the service knows %s)", env, strings.Join(names, ", "))
}
