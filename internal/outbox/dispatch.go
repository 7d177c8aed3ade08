package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// A DelivererOf takes an outbox's records somewhere: a forge, a chat, a
// webhook's receiver, a mail server. The Dispatcher calls it outside any
// store transaction, one record at a time unless it is a Burster.
type DelivererOf[T any] interface {
	// Name names it in logs, metrics and pages ("github", "slack").
	Name() string
	// Deliver delivers r. For a Publication, r.Ref is the deliverer's own
	// record of the rollout from an earlier delivery ("" before the
	// first); save records a new one, written with the delivery's
	// outcome, so that a later delivery updates it rather than make a
	// second. It returns nil once delivered, a Skip when r is not shown
	// there, an *Error (or any error: transient) when it failed.
	Deliver(ctx context.Context, r T, save func(ref string)) error
}

// A Deliverer shows verdicts in one place: a forge, a chat, a webhook's
// receiver.
type Deliverer = DelivererOf[Publication]

// A Burster is a deliverer that takes a burst of records at once (over one
// SMTP connection, with one sync of a directory). It tells each outcome
// by done as soon as it is final, in order, and does not go on before
// done returns: the dispatcher records the outcome there. A record it
// leaves untold (ctx ended) waits, untried, for the next burst.
type Burster[T any] interface {
	DeliverEach(ctx context.Context, rs []T, done func(i int, err error))
}

// Skip is a publication its deliverer does not show, and why (no
// repository known, no git commit): recorded as taken.
type Skip string

func (s Skip) Error() string { return "not shown: " + string(s) }

// Error is a refusal, classed for the dispatcher: Retry is a transient
// failure (network, 5xx, rate limit), tried again after After when the
// service said (Retry-After, a rate limit's reset), else with backoff; any
// other error is permanent (401, 404, 422: dead-lettered). Gone says that
// the record the delivery used (Publication.Ref) is no more: the next
// delivery makes another.
type Error struct {
	Status  int // HTTP status, 0 for a network error
	Retry   bool
	After   time.Duration
	Limited bool // a rate limit: no request to the service before After
	Gone    bool
	Message string
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return e.Message
	}
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Classify classes an HTTP answer by status and headers: 429 and a 403
// that carries Retry-After or an exhausted rate limit (GitHub's secondary
// limits) are rate limits; 5xx and 408 are transient; any other 4xx is
// permanent.
func Classify(status int, h http.Header, message string, now time.Time) *Error {
	e := &Error{Status: status, Message: message}
	after, limited := retryAfter(h, now)
	switch {
	case status == http.StatusTooManyRequests,
		status == http.StatusForbidden && (limited || h.Get("X-Ratelimit-Remaining") == "0"):
		e.Retry, e.Limited, e.After = true, true, after
		if e.After <= 0 {
			e.After = time.Minute // GitHub: wait at least a minute when it says nothing
		}
	case status >= 500, status == http.StatusRequestTimeout:
		e.Retry, e.After = true, after
	}
	return e
}

// retryAfter reads Retry-After (seconds or an HTTP date) or, without it,
// the rate limit's reset (X-RateLimit-Reset, epoch seconds) when the limit
// is exhausted.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), 0), true
		}
	}
	if h.Get("X-Ratelimit-Remaining") == "0" {
		if s, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(s, 0).Sub(now), 0), true
		}
	}
	return 0, false
}

// AsError returns err's *Error, or a transient one for any other error (a
// network error: the request may not have reached the service).
func AsError(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return &Error{Retry: true, Message: err.Error()}
}

// netError is a request's failure to reach a service (transient), named
// by its cause alone: a *url.Error names the URL, which may be a secret
// (a Teams webhook's signature) or carry credentials.
func netError(service string, err error) *Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &Error{Retry: true, Message: service + ": " + err.Error()}
}

// Send sends req with hc: nil when the service took it (2xx), else its
// refusal classed (Classify, with the start of its answer) or the
// network's failure (netError); service names it in both.
func Send(hc *http.Client, req *http.Request, service string, now func() time.Time) error {
	resp, err := hc.Do(req)
	if err != nil {
		return netError(service, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return Classify(resp.StatusCode, resp.Header, service+": "+strings.TrimSpace(string(answer)), now())
	}
	return nil
}

// Backoff of transient failures without a Retry-After: first retry after
// backoffBase, doubling, never more than DispatchConfig.MaxBackoff apart.
const (
	backoffBase = 15 * time.Second
	backoffMax  = 10 * time.Minute
)

// DispatchConfig is what a Dispatcher needs besides its outbox and
// deliverer.
type DispatchConfig struct {
	// AlertAfter: a record undelivered for longer makes Warning say so.
	AlertAfter time.Duration
	// Pace, when set, spaces the deliveries of a rollout that only say
	// more of the verdict the channel took last (progress, a restated
	// failure): at most one each Pace after the last, the latest then. A
	// new verdict goes at once. (Slack asks for a message a second per
	// channel at most; a rollout's layers applying one after the other
	// would update its message as often.)
	Pace time.Duration
	// Takes says which publications the channel takes (nil: every one):
	// only those wake it (Published).
	Takes func(rollout.Published) bool
	// MaxBackoff bounds the wait between transient failures (10 minutes
	// when zero).
	MaxBackoff time.Duration
	// OneByOne writes each outcome before the next delivery, and a
	// failure to write it stops the burst: a crash, or the store's
	// failure, repeats at most the one delivery under way (a mail). Else
	// outcomes are written in batches (recorder).
	OneByOne bool
	// What a record is, in logs: "verdict" when empty, "mail".
	What string
	Log  *slog.Logger
	Now  func() time.Time
	Reg  prometheus.Registerer // nil: fdn_deliveries_total not registered
	// Counted, when set, is told each outcome (one of OutcomeNames) too,
	// for counters of a channel's own.
	Counted func(outcome string)
}

// Dispatcher delivers one channel's outbox of verdicts.
type Dispatcher = DispatcherOf[Publication, *Publication]

// MailDispatcher delivers the mail outbox.
type MailDispatcher = DispatcherOf[Queued, *Queued]

// DispatcherOf delivers one outbox: every channel's verdicts and the
// mails, with one set of rules (what is due, retries with backoff or when
// the service says, its rate limit, dead letters, the warning, the
// counters). No network I/O happens inside a store transaction: it reads
// the records, calls the deliverer, then records each outcome.
type DispatcherOf[T any, P Record[T]] struct {
	outbox Box[T]
	rec    *recorder[T] // writes outcomes to outbox
	to     DelivererOf[T]
	cfg    DispatchConfig
	log    *slog.Logger
	wake   Waker

	// Owned by Flush.
	limitedUntil time.Time // the service's rate limit: no request before
	warner       Warner

	mu        sync.Mutex
	paced     map[rollout.Key]paced // the rollouts the last Flush left to their pace
	refusal   string                // the last refusal, until a delivery succeeds
	transient string                // the last transient failure
	waiting   []time.Time           // since when each record the last Flush left undelivered waits
	dead      time.Time             // a record refused for good since the last delivery

	outcomes *prometheus.CounterVec // fdn_deliveries_total, nil when not registered
}

// OutcomeNames are the outcomes of a delivery, as the metrics count them.
func OutcomeNames() []string {
	var out []string
	for o := Delivered; o < Saved; o++ {
		out = append(out, o.String())
	}
	return out
}

// NewDispatcher wires a dispatcher of box's verdicts to to. Its outcomes
// are counted in fdn_deliveries_total (one counter for every channel's
// dispatcher on cfg.Reg).
func NewDispatcher(box Verdicts, to Deliverer, cfg DispatchConfig) *Dispatcher {
	return newDispatcher[Publication](verdicts{box}, to, cfg)
}

// NewMailDispatcher wires a dispatcher of the mail outbox to to.
func NewMailDispatcher(box Mails, to DelivererOf[Queued], cfg DispatchConfig) *MailDispatcher {
	return newDispatcher[Queued](mails{box}, to, cfg)
}

func newDispatcher[T any, P Record[T]](box Box[T], to DelivererOf[T], cfg DispatchConfig) *DispatcherOf[T, P] {
	log := cfg.Log.With("channel", to.Name())
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = backoffMax
	}
	if cfg.What == "" {
		cfg.What = "verdict"
	}
	d := &DispatcherOf[T, P]{outbox: box, rec: newRecorder(box, log), to: to, cfg: cfg, log: log, warner: Warner{Log: log}, wake: NewWaker()}
	if cfg.Reg != nil {
		all := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fdn_deliveries_total",
			Help: "Verdicts delivered to a channel (a forge, slack, teams, webhook), by outcome: sent, retried (transient failure), rate_limited, dead (refused for good), skipped (not shown there).",
		}, []string{"channel", "outcome"})
		if err := cfg.Reg.Register(all); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err) // a programming error, as MustRegister's
			}
			all = are.ExistingCollector.(*prometheus.CounterVec)
		}
		for _, o := range OutcomeNames() {
			all.WithLabelValues(to.Name(), o)
		}
		d.outcomes = all
	}
	return d
}

func (d *DispatcherOf[T, P]) count(outcome string) {
	if d.outcomes != nil {
		d.outcomes.WithLabelValues(d.to.Name(), outcome).Inc()
	}
	if d.cfg.Counted != nil {
		d.cfg.Counted(outcome)
	}
}

// Wake tells the dispatcher that its outbox has something new. It never
// blocks.
func (d *DispatcherOf[T, P]) Wake() { d.wake.Wake() }

// Published tells the dispatcher that ps were published: it wakes when
// it takes one of them (DispatchConfig.Takes) that does not only restate,
// within its pace, the verdict its rollout was shown last, which the
// Flush at the pace's end delivers anyway, the latest then. A rollout's
// layers applying one by one publish its progress at every commit;
// without this, a channel that takes no progress would read its outbox at
// each, and one that paces it would, to find every rollout still waiting
// for its pace. It never blocks.
func (d *DispatcherOf[T, P]) Published(ps []rollout.Published) {
	var now time.Time
	if d.cfg.Pace > 0 {
		now = d.cfg.Now()
	}
	d.mu.Lock()
	wake := false
	for _, p := range ps {
		if d.cfg.Takes != nil && !d.cfg.Takes(p) {
			continue
		}
		if q, ok := d.paced[p.Key]; ok && q.sent == p.Verdict && now.Before(q.until) {
			continue
		}
		wake = true
		break
	}
	d.mu.Unlock()
	if wake {
		d.wake.Wake()
	}
}

// Run delivers until ctx ends: at start (what a previous run left), when
// woken, and when the earliest retry is due.
func (d *DispatcherOf[T, P]) Run(ctx context.Context) error {
	return Run(ctx, d.wake, d.cfg.Now, d.Flush)
}

// Stuck counts the records the last Flush left undelivered that have
// waited for longer than after, gives the oldest one's wait's start, and
// the last transient failure.
func (d *DispatcherOf[T, P]) Stuck(after time.Duration) (n int, oldest time.Time, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cutoff := d.cfg.Now().Add(-after)
	for _, at := range d.waiting {
		if at.Before(cutoff) {
			n++
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
	}
	return n, oldest, d.transient
}

// Warning says that the channel refused a verdict for good (until one is
// delivered again), or that verdicts wait because it refuses them, since
// when and why; "" while they go out within AlertAfter.
func (d *DispatcherOf[T, P]) Warning() string {
	n, oldest, _ := d.Stuck(d.cfg.AlertAfter)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refusal == "":
		return ""
	case !d.dead.IsZero():
		return fmt.Sprintf("%s: %ss refused for good (dead-lettered) since %s: %s", d.to.Name(), d.cfg.What, d.dead.UTC().Format(time.RFC3339), d.refusal)
	case n == 0:
		return ""
	}
	return fmt.Sprintf("%s: %ss undelivered since %s: %s", d.to.Name(), d.cfg.What, oldest.UTC().Format(time.RFC3339), d.refusal)
}

// Flush delivers every record due, oldest first, records each outcome,
// and returns when the next retry is due (zero when nothing waits). A
// rate limit stops the burst: no request goes to the service before it
// ends.
func (d *DispatcherOf[T, P]) Flush(ctx context.Context) time.Time {
	now := d.cfg.Now()
	if now.Before(d.limitedUntil) {
		return d.limitedUntil
	}
	rs, err := d.outbox.Due()
	if err != nil {
		d.warner.Warn("read the outbox of "+d.to.Name(), err)
		return now.Add(backoffBase)
	}
	var (
		next    time.Time
		waiting []time.Time
		due     []P // into rs: a record is not copied
	)
	pacing := map[rollout.Key]paced{}
	defer func() {
		// The next Flush reads what this one recorded.
		d.rec.wait()
		d.mu.Lock()
		d.waiting, d.paced = waiting, pacing
		d.mu.Unlock()
	}()
	wait := func(p P, at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
		waiting = append(waiting, p.since())
	}
	for i := range rs {
		p := P(&rs[i])
		if p.delivery().Waiting(now) {
			wait(p, p.delivery().NextAttempt)
		} else if q, ok := p.paced(d.cfg.Pace, now); ok {
			wait(p, q.until)
			pacing[q.key] = q
		} else {
			due = append(due, p)
		}
	}
	if len(due) == 0 {
		return next
	}
	told := make([]bool, len(due))
	burst, stop := context.WithCancel(ctx)
	defer stop()
	// When what the burst did not reach is tried: after a rate limit or a
	// failure to record, else at the next start (ctx ended).
	var resume time.Time
	d.deliverEach(burst, due, func(i int, err error) {
		told[i] = true
		at, limited := d.outcome(due[i], err)
		switch {
		case limited:
			resume = d.limitedUntil
			stop()
		case d.cfg.OneByOne && d.rec.wait() != nil:
			// Not recorded, it goes again: not in a loop while the
			// store fails.
			resume = d.cfg.Now().Add(backoffBase)
			at = resume
			stop()
		}
		if !at.IsZero() {
			wait(due[i], at)
		}
	})
	for i, p := range due {
		switch {
		case told[i]:
		case resume.IsZero():
			waiting = append(waiting, p.since())
		default:
			wait(p, resume)
		}
	}
	return next
}

// deliverEach hands the records ps point to to the deliverer: as a burst
// to a Burster, else one at a time until ctx ends.
func (d *DispatcherOf[T, P]) deliverEach(ctx context.Context, ps []P, done func(int, error)) {
	if b, ok := d.to.(Burster[T]); ok {
		rs := make([]T, len(ps))
		for i, p := range ps {
			rs[i] = *p
		}
		b.DeliverEach(ctx, rs, done)
		return
	}
	for i, p := range ps {
		if ctx.Err() != nil {
			return
		}
		// Written with the delivery's outcome, in order, before the next
		// Flush reads the outbox: a later delivery updates what this one
		// made. A crash before it is written makes another next time, as
		// a failure to record it does (a forge finds its deployment again
		// by its marker; a chat may post twice).
		save := func(ref string) { d.record(p, Saved, time.Time{}, func(q *T) { P(q).saved(ref) }) }
		done(i, d.to.Deliver(ctx, *p, save))
	}
}

// outcome records what became of a delivery of r (err: Deliver's); it
// returns when r is to be tried again (zero: delivered, skipped or dead),
// and whether the service's rate limit stopped it.
func (d *DispatcherOf[T, P]) outcome(r P, err error) (time.Time, bool) {
	log := d.log.With(r.attrs()...)
	var skip Skip
	switch {
	case errors.As(err, &skip):
		d.record(r, Skipped, time.Time{}, func(q *T) { P(q).skipped(r, skip.Error()) })
		log.Debug(d.cfg.What+" not shown", "why", string(skip))
		return time.Time{}, false
	case err != nil:
		fe := AsError(err)
		if fe.Gone && r.ref() != "" {
			// The record used is gone (deleted in the service): the next
			// delivery finds or makes another.
			d.record(r, Saved, time.Time{}, func(q *T) { P(q).saved("") })
			fe = &Error{Status: fe.Status, Retry: true, Message: "the record of it is gone: " + fe.Message}
		}
		return d.retry(r, fe, log)
	}
	at := d.cfg.Now()
	d.record(r, Delivered, at, func(q *T) { P(q).delivered(r, at) })
	d.mu.Lock()
	d.refusal, d.dead = "", time.Time{}
	d.mu.Unlock()
	return time.Time{}, false
}

// retry records a failed delivery: again after the service's Retry-After
// or with backoff when transient, dead-lettered when not. The wait counts
// from now, when the answer arrived: a Retry-After is the service's word
// from then, and a rate limit's reset was read against it (Classify).
func (d *DispatcherOf[T, P]) retry(r P, fe *Error, log *slog.Logger) (time.Time, bool) {
	now := d.cfg.Now()
	d.mu.Lock()
	d.refusal = fe.Error()
	if !fe.Retry && d.dead.IsZero() {
		d.dead = now
	}
	if fe.Retry {
		d.transient = fe.Error()
	}
	d.mu.Unlock()
	if !fe.Retry {
		d.record(r, DeadLettered, time.Time{}, func(q *T) { P(q).deadLettered(r, fe.Error()) })
		log.Error(d.to.Name()+" refused the "+d.cfg.What+" for good, dead-lettered", "err", fe.Error())
		return time.Time{}, false
	}
	after := fe.After
	if after <= 0 {
		after = Backoff(r.delivery().Attempts+1, backoffBase, d.cfg.MaxBackoff)
	}
	at := now.Add(after)
	o := Retried
	if fe.Limited {
		o = RateLimited
		d.limitedUntil = at
	}
	d.record(r, o, time.Time{}, func(q *T) { P(q).delivery().Retry(at, fe.Error()) })
	d.warner.Warn("deliver a "+d.cfg.What+" to "+d.to.Name()+", will retry", fe)
	return at, fe.Limited
}

// record applies f to r's record, in the order outcomes come: written
// with the outcomes that arrive while the write before is under way, in
// one transaction (recorder). A failure to record is logged: the delivery
// then happens again, which every channel takes (an update in place, an
// idempotency key, a mail's Message-ID).
func (d *DispatcherOf[T, P]) record(r P, o Outcome, at time.Time, f func(*T)) {
	d.rec.add(Change[T]{Of: r, Outcome: o, At: at, Apply: f})
	if o != Saved { // not an outcome of a delivery: the deliverer's record
		d.count(o.String())
	}
}

// recorder writes a dispatcher's outcomes as they come, in batches: what
// arrived while the last batch was being written is the next batch (a
// group commit), so that a burst of deliveries costs a handful of store
// transactions, not one each, and an outcome waits for at most one write
// before its own. An outcome not written yet when the process dies is a
// delivery made again at the next start: each verdict at most once more
// per crash, as before, though a crash may now repeat several rollouts'
// (DispatchConfig.OneByOne waits for each).
type recorder[T any] struct {
	box Box[T]
	log *slog.Logger

	mu      sync.Mutex
	pending []Change[T]
	writing bool
	failed  error      // a write's failure since the last wait
	idle    *sync.Cond // signalled when a write ends with nothing pending
}

func newRecorder[T any](box Box[T], log *slog.Logger) *recorder[T] {
	r := &recorder[T]{box: box, log: log}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// add queues c and starts a writer when none runs.
func (r *recorder[T]) add(c Change[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, c)
	if !r.writing {
		r.writing = true
		go r.write()
	}
}

// write writes what is pending, batch after batch, until nothing is.
func (r *recorder[T]) write() {
	r.mu.Lock()
	for len(r.pending) > 0 {
		batch := r.pending
		r.pending = nil
		r.mu.Unlock()
		err := r.box.Update(batch)
		if err != nil {
			r.log.Warn("record deliveries", "err", err, "outcomes", len(batch))
		}
		r.mu.Lock()
		if err != nil {
			r.failed = err
		}
	}
	r.writing = false
	r.idle.Broadcast()
	r.mu.Unlock()
}

// wait returns once every outcome added is written, with the failure of
// a write since the last wait, if any.
func (r *recorder[T]) wait() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.writing {
		r.idle.Wait()
	}
	err := r.failed
	r.failed = nil
	return err
}
