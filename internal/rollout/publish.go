package rollout

import "time"

// Published is a rollout's verdict others show (a forge's deployment of
// the commit, a chat message, a webhook's receiver: the outbox's
// channels), with what they show of it: written to the outbox in the
// same transaction as the change that decided it, so that it is
// delivered at least once, whatever happens to the process after the
// commit.
type Published struct {
	Key     Key
	Verdict Verdict
	At      time.Time
	// Restate: the verdict is the one before, but what it says changed
	// (a failed release that helm-controller gave up on since): deliver
	// it again.
	Restate bool
	// Progress: the verdict is the one before (applying), but more of
	// its layers have applied it: a channel that shows progress
	// (Config.Progress) is told again, the others not.
	Progress bool
	Shown
}

// Shown is what is shown of a rollout with its verdict: its view's, when
// the verdict was decided (or restated, or progressed).
type Shown struct {
	Revision string
	Commit   string // the git commit it deployed, "" when none (View.Commit)
	Source   Ref
	Summary  string
	// Done of Expected layers have applied it.
	Done, Expected int
	Completed      time.Time // when it applied (applied)
	Late           bool      // applied after the deadline
	Failure        ShownFailure
	RootCause      string // stuck: the layer the others wait on
	SupersededBy   string // superseded: the newer revision
}

// ShownFailure is the failure that decided a failed verdict: its layer,
// the HelmRelease or object it names, and Flux's words.
type ShownFailure struct {
	Layer   string
	Release Ref    // a HelmRelease's failure inside Layer
	Object  string // Kind/namespace/name of the first object Flux named
	Reason  string
	Message string // at most MaxShownMessage bytes and the cut's mark
	Stalled bool   // helm-controller gave up: a new commit is needed
}

// MaxShownMessage bounds the Flux message a verdict carries to its
// channels: a chat shows a few lines, and each record of the outbox
// keeps one.
const MaxShownMessage = 1000

// ShownOf is what v shows.
func ShownOf(v *View) Shown {
	s := Shown{Revision: v.Revision, Commit: v.Commit, Source: v.Source, Summary: v.Summary,
		Expected: v.Layers.Len(), Late: v.Late, RootCause: v.RootCause}
	s.Done = max(s.Expected-len(v.Behind), 0)
	if v.Verdict == VerdictApplied {
		s.Done = s.Expected
	}
	if v.CompletedAt != nil {
		s.Completed = *v.CompletedAt
	}
	if v.SupersededBy != nil {
		s.SupersededBy = *v.SupersededBy
	}
	if f := v.DecidingFailure(); v.Verdict == VerdictFailed && f != nil {
		s.Failure = ShownFailure{Layer: f.Layer, Release: f.Release, Reason: f.Reason,
			Message: truncate(f.Message, MaxShownMessage), Stalled: f.Stalled}
		if len(f.Objects) > 0 {
			o := f.Objects[0]
			s.Failure.Object = o.Kind + "/" + o.Namespace + "/" + o.Name
			if o.Namespace == "" {
				s.Failure.Object = o.Kind + "/" + o.Name
			}
		}
	}
	return s
}
