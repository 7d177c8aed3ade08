package rollout

import "time"

// Published is a rollout whose verdict others show (a forge's deployment
// of the commit, internal/forge): written to the forge outbox in the same
// transaction as the change that decided it, so that it is delivered at
// least once, whatever happens to the process after the commit.
type Published struct {
	Key     Key
	Verdict Verdict
	At      time.Time
	// Restate: the verdict is the one before, but what it says changed
	// (a failed release that helm-controller gave up on since): deliver
	// it again.
	Restate bool
}

// Publication is what the forge outbox holds of one rollout: the latest
// verdict decided, and what the forge was last given. A later verdict
// replaces an earlier one not yet delivered: the forge is told the state
// that is due, not each state it missed.
type Publication struct {
	Key     Key
	Verdict Verdict   // the latest decided
	Seq     uint64    // counts the changes of Verdict
	Changed time.Time // when Verdict was decided
	// Since is when the earliest verdict not delivered yet was decided:
	// a later one replaces it, not the time the forge has been waiting.
	Since time.Time
	// SentSeq is the Seq the forge last took, Sent its verdict.
	SentSeq uint64
	Sent    Verdict
	// Ref is the forge's own record of the rollout (a deployment's id),
	// once made: kept before its first status is posted, so that a crash
	// in between does not make a second one.
	Ref         string
	Attempts    int       // at Seq
	NextAttempt time.Time // while retrying
	LastError   string
	// Dead: the forge refused Seq for good (dead-lettered); a later
	// verdict is tried again.
	Dead bool
}

// Due reports whether p has a verdict the forge has not taken.
func (p Publication) Due() bool { return p.SentSeq < p.Seq && !p.Dead }
