package outbox

import (
	"slices"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The outbox's contract: what the store keeps of each delivery, and the
// operations the dispatchers use. What is due comes from rollout (a Mail,
// a Published verdict), decided in the transaction of the change that
// made it due; how its delivery goes is recorded here, the same way for
// a mail and a verdict for a channel.

// Delivery is where one delivery stands.
type Delivery struct {
	Attempts    int       // failed attempts
	NextAttempt time.Time // while retrying
	LastError   string
	// Dead: refused for good (dead-lettered); only something new to
	// deliver is tried again.
	Dead bool
}

// Retry records a transient failure: tried again at at.
func (d *Delivery) Retry(at time.Time, err string) {
	d.Attempts++
	d.NextAttempt, d.LastError = at, err
}

// DeadLetter records a failure for good.
func (d *Delivery) DeadLetter(err string) {
	d.Attempts++
	d.NextAttempt, d.LastError, d.Dead = time.Time{}, err, true
}

// Waiting reports whether the next attempt is after now.
func (d *Delivery) Waiting(now time.Time) bool { return d.NextAttempt.After(now) }

// Queued is a mail in the outbox (or among the dead letters) with its
// delivery: kept in the record so that retries and their backoff survive
// restarts.
type Queued struct {
	Seq      uint64
	Mail     rollout.Mail
	Enqueued time.Time
	Delivery
}

// MailState is what became of a queued mail.
type MailState string

const (
	MailWaiting  MailState = "waiting"  // in the outbox, not tried yet
	MailRetrying MailState = "retrying" // a transient failure; tried again later
	MailSent     MailState = "sent"
	MailDead     MailState = "dead" // failed for good: dead-lettered
)

// MailStatus is one mail of a rollout as its status page shows it: to
// whom, about what, and what became of it (the mail log).
type MailStatus struct {
	Kind     rollout.MailKind
	To       string
	Layer    string
	Object   *rollout.Object
	Reason   string
	Release  rollout.Ref // a failed mail's release inside Layer
	Enqueued time.Time
	State    MailState
	Sent     *time.Time
	// Delivery is the mail's when its state was logged; its NextAttempt
	// only while retrying, Dead when dead-lettered.
	Delivery
}

// Publication is what a channel's outbox holds of one rollout's verdict:
// the latest verdict decided, with what is shown of it, and what the
// channel was last given. A later verdict replaces an earlier one not yet
// delivered: the channel is told the state that is due, not each state it
// missed.
type Publication struct {
	Key     rollout.Key
	Verdict rollout.Verdict // the latest decided
	// Shown is what the channel is shown with it, as decided with it: the
	// dispatcher reads nothing else. Zero in a record an older binary
	// wrote whose rollout was gone when this one opened it.
	rollout.Shown
	Seq     uint64    // counts the changes of Verdict
	Changed time.Time // when Verdict was decided
	// Since is when the earliest verdict not delivered yet was decided:
	// a later one replaces it, not the time the channel has been waiting.
	Since time.Time
	// SentSeq is the Seq the channel last took, Sent its verdict, SentAt
	// when.
	SentSeq uint64
	Sent    rollout.Verdict
	SentAt  time.Time
	// Ref is the channel's own record of the rollout (a forge's
	// deployment's id, a chat message's), once made: kept before it is
	// changed, so that a crash in between does not make a second one.
	Ref string
	// Delivery is that of Seq: a later verdict starts a new one.
	Delivery
}

// Due reports whether p has a verdict the channel has not taken.
func (p Publication) Due() bool { return p.SentSeq < p.Seq && !p.Dead }

// Delivered records in p, the record as stored, that a delivery of d (the
// record as it was read) went out at at.
func (p *Publication) Delivered(d Publication, at time.Time) {
	p.SentSeq, p.Sent, p.SentAt = max(p.SentSeq, p.taken(d)), d.Verdict, at
	if p.SentSeq == p.Seq {
		p.Delivery = Delivery{}
	}
}

// taken is the Seq of p's record that a delivery of d took: d's, unless
// the record holds something else under that number (progress shown by a
// read, not recorded yet, numbered as the change a commit made since),
// which stays due.
func (p Publication) taken(d Publication) uint64 {
	if p.Seq == d.Seq && (p.Verdict != d.Verdict || p.Shown != d.Shown) {
		return d.Seq - 1
	}
	return d.Seq
}

// Mails is the mail outbox as the mail dispatcher uses it.
type Mails interface {
	// Pending returns the mails to deliver, oldest first.
	Pending() ([]Queued, error)
	// Sent records q's mail delivered at at.
	Sent(seq uint64, at time.Time) error
	// Record records a failed attempt at q: its delivery says when it is
	// tried again, or that it is dead (a dead letter).
	Record(q Queued) error
}

// Channel is one outbox of verdicts (a forge, Slack, Teams, a webhook)
// and which publications it takes: every verdict change but those of
// Skip, what is restated or progresses when it says so.
type Channel struct {
	Name     string // its records': "forge", "slack", "teams" or "webhook"
	Restate  bool   // takes a verdict restated (rollout.Published.Restate)
	Progress bool   // takes more layers applied (rollout.Published.Progress)
	Skip     []rollout.Verdict
}

// ForgeChannel is the forge's outbox: every verdict change, and a failure
// restated (its description changed), never progress.
func ForgeChannel() Channel { return Channel{Name: "forge", Restate: true} }

// Takes reports whether c is told of p.
func (c Channel) Takes(p rollout.Published) bool {
	switch {
	case slices.Contains(c.Skip, p.Verdict):
		return false
	case p.Progress:
		return c.Progress
	case p.Restate:
		return c.Restate
	}
	return true
}

// Verdicts is one channel's outbox as its dispatcher uses it.
type Verdicts interface {
	// Publications returns the records with a verdict not delivered yet,
	// oldest decision first.
	Publications() ([]Publication, error)
	// UpdatePublications applies each update to its record, in order, in
	// one transaction.
	UpdatePublications(ups []Update) error
}

// Update is a change to the record of one rollout in a channel's outbox:
// what a delivery's outcome records.
type Update struct {
	Key   rollout.Key
	Apply func(*Publication)
}

// Heads keep the commit a forge last showed applied on a cluster, by the
// line of commits it is on (a source, else a repository).
type Heads interface {
	Head(cluster, line string) (string, error)
	SetHead(cluster, line, commit string) error
}
