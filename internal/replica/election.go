package replica

import (
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// election is the lease's decisions, apart from the SQL and the timers
// around it, as etcd's raft separates its Step from its I/O: told what
// happened (step), it says what to do (actions), and holds nothing but
// the term it leads in and when that term runs out on this replica's
// clock. elect is the driver: it asks PostgreSQL, runs the timers and
// does the actions. The rules:
//
//   - following, every tick campaigns; a campaign won begins a term;
//   - leading, every tick renews; a renewal that says the lease is
//     another's ends the term (nothing to give up); one that succeeds
//     moves the term's end;
//   - a term ends, and the lease is given up, when the time it was last
//     renewed for runs out before a renewal succeeds (less a renewal, for
//     the clocks' drift and the term's own last writes), so that this
//     replica stops leading even when it cannot reach the database to
//     learn that it lost; when leading stops on its own; and when the
//     replica stops;
//   - the lease runs from before it was asked for, on this clock;
//   - an answer about a term no longer held changes nothing.
type election struct {
	ttl, renew time.Duration
	term       *store.Lease // held; nil while following
	until      time.Time    // when term runs out unrenewed, on this clock
}

// happening is what the driver tells the election.
type happening int

const (
	tick        happening = iota // time to campaign or renew
	answered                     // a campaign's or a renewal's answer came
	timedOut                     // the expiry timer fired
	leadStopped                  // leading stopped on its own
	stopping                     // the replica stops
)

// input is one thing that happened, at now; for answered: whether the
// question was a renewal (else a campaign), when it was asked, the lease
// asked about (a renewal's) or won (a campaign's), and whether it holds;
// err when the database could not be asked.
type input struct {
	what    happening
	now     time.Time
	renewal bool
	asked   time.Time
	lease   store.Lease
	ok      bool
	err     error
}

// doing is what the driver does.
type doing int

const (
	campaign doing = iota // ask for the lease
	renew                 // renew lease
	begin                 // begin a term in lease, until at
	extend                // the term now runs out at at
	end                   // end the term; give the lease up when resign
)

// action is one thing to do.
type action struct {
	do     doing
	lease  store.Lease
	at     time.Time
	why    string
	resign bool
}

// step takes what happened and returns what to do, in order.
func (e *election) step(in input) []action {
	switch in.what {
	case tick:
		if e.term == nil {
			return []action{{do: campaign}}
		}
		return []action{{do: renew, lease: *e.term}}
	case answered:
		return e.answered(in)
	case timedOut:
		if e.term != nil && !in.now.Before(e.until) {
			return e.end("the lease ran out before it was renewed", true)
		}
	case leadStopped:
		return e.end("leading failed", true)
	case stopping:
		return e.end("stopping", true)
	}
	return nil
}

func (e *election) answered(in input) []action {
	until := in.asked.Add(e.ttl - e.renew)
	switch {
	case in.err != nil:
		return nil // the expiry timer ends the term if no renewal comes in time
	case !in.renewal && e.term == nil && in.ok:
		l := in.lease
		e.term, e.until = &l, until
		return []action{{do: begin, lease: l, at: until}}
	case !in.renewal || e.term == nil || in.lease != *e.term:
		return nil // a campaign lost, or an answer about a term no longer held
	case !in.ok:
		return e.end("another replica holds the lease", false)
	}
	e.until = until
	return []action{{do: extend, lease: *e.term, at: until}}
}

// end ends the term held, if any.
func (e *election) end(why string, resign bool) []action {
	if e.term == nil {
		return nil
	}
	l := *e.term
	e.term, e.until = nil, time.Time{}
	return []action{{do: end, lease: l, why: why, resign: resign}}
}
