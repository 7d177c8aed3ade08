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

func (d *Delivery) delivery() *Delivery { return d }

// A Record is what an outbox keeps of one delivery, as the Dispatcher
// reads it and records its outcome: a channel's Publication of a
// rollout's verdict, or a Queued mail. Its methods are all that differs
// between the two; the rules (what is due, the retry, the rate limit, the
// dead letter) are the dispatcher's, one for both.
type Record[T any] interface {
	*T
	delivery() *Delivery
	// since is when it began to wait: when the oldest thing it holds
	// that is not delivered became due.
	since() time.Time
	// paced says that it only restates, within pace, what was delivered
	// last: it goes at the pace's end.
	paced(pace time.Duration, now time.Time) (paced, bool)
	attrs() []any
	// The outcomes of a delivery of r (the record as read), applied to
	// the record as stored.
	delivered(r *T, at time.Time)
	skipped(r *T, why string)
	deadLettered(r *T, err string)
	saved(ref string)
	ref() string // the deliverer's record of it, "" for none
}

// paced is a rollout whose next delivery waits for its pace: until then a
// publication that restates sent goes at until, the latest then.
type paced struct {
	key   rollout.Key
	sent  rollout.Verdict
	until time.Time
}

// Queued is a mail in the outbox (or among the dead letters) with its
// delivery: kept in the record so that retries and their backoff survive
// restarts.
type Queued struct {
	Seq      uint64
	Mail     rollout.Mail
	Enqueued time.Time
	Delivery
}

func (q *Queued) since() time.Time                             { return q.Enqueued }
func (q *Queued) paced(time.Duration, time.Time) (paced, bool) { return paced{}, false }
func (q *Queued) deadLettered(_ *Queued, err string)           { q.DeadLetter(err) }
func (q *Queued) ref() string                                  { return "" }

// A mail sent leaves the outbox for the mail log (Mails.Sent), and a mail
// has no record of the deliverer's to keep: neither changes it.
func (q *Queued) delivered(*Queued, time.Time) {}
func (q *Queued) saved(string)                 {}

// skipped: a mail its deliverer does not send is a dead letter, with why.
func (q *Queued) skipped(_ *Queued, why string) { q.DeadLetter(why) }

// attrs names a mail in logs: kind, recipient and, for a rollout's mail,
// its cluster and revision.
func (q *Queued) attrs() []any {
	attrs := []any{"mail", string(q.Mail.Kind), "to", q.Mail.To}
	if v := q.Mail.View; v != nil {
		attrs = append(attrs, "cluster", v.Cluster, "revision", v.Revision)
	}
	return attrs
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

func (p *Publication) since() time.Time { return p.Since }

func (p *Publication) paced(pace time.Duration, now time.Time) (paced, bool) {
	at := p.SentAt.Add(pace)
	if pace > 0 && p.SentSeq > 0 && p.Sent == p.Verdict && now.Before(at) {
		return paced{key: p.Key, sent: p.Sent, until: at}, true
	}
	return paced{}, false
}

func (p *Publication) attrs() []any {
	return []any{"cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String()}
}

func (p *Publication) delivered(r *Publication, at time.Time) { p.Delivered(*r, at) }

func (p *Publication) skipped(r *Publication, why string) {
	p.SentSeq, p.LastError = max(p.SentSeq, p.taken(*r)), why
}

// deadLettered: only the verdict refused; a later one is tried.
func (p *Publication) deadLettered(r *Publication, err string) {
	if p.Seq == r.Seq {
		p.DeadLetter(err)
	}
}

func (p *Publication) saved(ref string) { p.Ref = ref }
func (p *Publication) ref() string      { return p.Ref }

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

// Box is an outbox as its Dispatcher uses it.
type Box[T any] interface {
	// Due returns the records not delivered yet, oldest first.
	Due() ([]T, error)
	// Update applies each change to its record, in order.
	Update(cs []Change[T]) error
}

// Change is an outcome to record: Apply changes the record of Of (the
// record as the dispatcher read it, unchanged) as stored.
type Change[T any] struct {
	Of      *T
	Outcome Outcome
	At      time.Time // when it was delivered, for Delivered
	Apply   func(*T)
}

// Outcome is what became of a delivery, as recorded and counted. A Box
// that keeps something of its own for an outcome (the mail log's sent
// time) reads it here rather than from the record.
type Outcome int

const (
	Delivered    Outcome = iota + 1
	Retried              // a transient failure: tried again later
	RateLimited          // the service's rate limit: tried again after it
	DeadLettered         // refused for good
	Skipped              // not shown there
	Saved                // not a delivery's outcome: the deliverer's record of it (Record.ref), "" when gone
)

// String is the outcome as the metrics count it (the label "outcome").
func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "sent"
	case Retried:
		return "retried"
	case RateLimited:
		return "rate_limited"
	case DeadLettered:
		return "dead"
	case Skipped:
		return "skipped"
	case Saved:
		return "saved"
	}
	return "unknown"
}

// mails is the mail outbox as a Box: each change its own transaction.
type mails struct{ Mails }

func (m mails) Due() ([]Queued, error) { return m.Pending() }

func (m mails) Update(cs []Change[Queued]) error {
	for _, c := range cs {
		var err error
		switch c.Outcome {
		case Delivered:
			err = m.Sent(c.Of.Seq, c.At)
		case Saved: // a mail keeps none
		default:
			q := *c.Of
			c.Apply(&q)
			err = m.Record(q)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// verdicts is a channel's outbox as a Box: the changes in one transaction.
type verdicts struct{ Verdicts }

func (v verdicts) Due() ([]Publication, error) { return v.Publications() }

func (v verdicts) Update(cs []Change[Publication]) error {
	ups := make([]Update, len(cs))
	for i, c := range cs {
		ups[i] = Update{Key: c.Of.Key, Apply: c.Apply}
	}
	return v.UpdatePublications(ups)
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
