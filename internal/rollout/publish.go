package rollout

import "time"

// Published is a rollout's verdict others show (a forge's deployment of
// the commit, internal/forge), with what they show of it: written to the
// forge outbox in the same transaction as the change that decided it, so
// that it is delivered at least once, whatever happens to the process
// after the commit.
type Published struct {
	Key     Key
	Verdict Verdict
	At      time.Time
	// Restate: the verdict is the one before, but what it says changed
	// (a failed release that helm-controller gave up on since): deliver
	// it again.
	Restate bool
	Shown
}

// Shown is what is shown of a rollout with its verdict: its view's, when
// the verdict was decided (or restated).
type Shown struct {
	Revision string
	Commit   string // the git commit it deployed, "" when none (View.Commit)
	Source   Ref
	Summary  string
}

// ShownOf is what v shows.
func ShownOf(v *View) Shown {
	return Shown{Revision: v.Revision, Commit: v.Commit, Source: v.Source, Summary: v.Summary}
}
