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

// A Deliverer shows verdicts in one place: a forge, a chat, a webhook's
// receiver. The Dispatcher calls it outside any store transaction, one
// publication at a time.
type Deliverer interface {
	// Name names it in logs, metrics and pages ("github", "slack").
	Name() string
	// Deliver shows p's verdict. p.Ref is the deliverer's own record of
	// the rollout from an earlier delivery ("" before the first); save
	// records a new one, written with the delivery's outcome, so that a
	// later delivery updates it rather than make a second. It returns nil
	// once shown, a Skip when p is not shown there, an *Error (or any
	// error: transient) when it failed.
	Deliver(ctx context.Context, p Publication, save func(ref string)) error
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
// backoffBase, doubling, never more than backoffMax apart.
const (
	backoffBase = 15 * time.Second
	backoffMax  = 10 * time.Minute
)

// DispatchConfig is what a Dispatcher needs besides its outbox and
// deliverer.
type DispatchConfig struct {
	// AlertAfter: a verdict undelivered for longer makes Warning say so.
	AlertAfter time.Duration
	// Pace, when set, spaces the deliveries of a rollout that only say
	// more of the verdict the channel took last (progress, a restated
	// failure): at most one each Pace after the last, the latest then. A
	// new verdict goes at once. (Slack asks for a message a second per
	// channel at most; a rollout's layers applying one after the other
	// would update its message as often.)
	Pace time.Duration
	Log  *slog.Logger
	Now  func() time.Time
	Reg  prometheus.Registerer // nil: no metrics
	// More are counters of the outcomes besides fdn_deliveries_total,
	// labelled by the deliverer's name and the outcome.
	More []*prometheus.CounterVec
}

// Dispatcher delivers one channel's outbox. No network I/O happens inside
// a store transaction: it reads the records, calls the deliverer, then
// records each outcome.
type Dispatcher struct {
	outbox Verdicts
	rec    *recorder // writes outcomes to outbox
	to     Deliverer
	cfg    DispatchConfig
	log    *slog.Logger
	wake   Waker

	// Owned by Flush.
	limitedUntil time.Time // the service's rate limit: no request before
	warner       Warner

	mu      sync.Mutex
	paced   map[rollout.Key]paced // the rollouts the last Flush left to their pace
	refusal string                // the last refusal, until a delivery succeeds
	oldest  time.Time             // the oldest verdict left undelivered by the last Flush
	dead    time.Time             // a verdict refused for good since the last delivery

	outcomes []*prometheus.CounterVec // each labelled by the deliverer's name and the outcome
}

// paced is a rollout whose next delivery waits for its pace: until then a
// publication that restates sent goes at until, the latest then.
type paced struct {
	sent  rollout.Verdict
	until time.Time
}

// Outcomes of a delivery, as the metrics count them.
var outcomes = []string{"sent", "retried", "rate_limited", "dead", "skipped"}

// NewDispatcher wires a dispatcher of box's verdicts to to. Its outcomes
// are counted in fdn_deliveries_total (one counter for every channel's
// dispatcher on cfg.Reg) and in cfg.More.
func NewDispatcher(box Verdicts, to Deliverer, cfg DispatchConfig) *Dispatcher {
	log := cfg.Log.With("channel", to.Name())
	d := &Dispatcher{outbox: box, rec: newRecorder(box, log), to: to, cfg: cfg, log: log, warner: Warner{Log: log}, wake: NewWaker()}
	all := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fdn_deliveries_total",
		Help: "Verdicts delivered to a channel (a forge, slack, teams, webhook), by outcome: sent, retried (transient failure), rate_limited, dead (refused for good), skipped (not shown there).",
	}, []string{"channel", "outcome"})
	if cfg.Reg != nil {
		if err := cfg.Reg.Register(all); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err) // a programming error, as MustRegister's
			}
			all = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	d.outcomes = append([]*prometheus.CounterVec{all}, cfg.More...)
	for _, c := range d.outcomes {
		for _, o := range outcomes {
			c.WithLabelValues(to.Name(), o)
		}
	}
	return d
}

func (d *Dispatcher) count(outcome string) {
	for _, c := range d.outcomes {
		c.WithLabelValues(d.to.Name(), outcome).Inc()
	}
}

// Wake tells the dispatcher that verdicts were published. It never blocks.
func (d *Dispatcher) Wake() { d.wake.Wake() }

// Published tells the dispatcher that ps were published: it wakes unless
// each only restates, within its pace, the verdict its rollout was shown
// last, which the Flush at the pace's end delivers anyway, the latest then.
// A rollout's layers applying one by one publish its progress at every
// commit; without this, each would read the outbox again to find every
// rollout still waiting for its pace. It never blocks.
func (d *Dispatcher) Published(ps []rollout.Published) {
	if d.cfg.Pace > 0 {
		now := d.cfg.Now()
		d.mu.Lock()
		waits := len(d.paced) > 0
		for _, p := range ps {
			if q, ok := d.paced[p.Key]; !ok || q.sent != p.Verdict || !now.Before(q.until) {
				waits = false
				break
			}
		}
		d.mu.Unlock()
		if waits {
			return
		}
	}
	d.wake.Wake()
}

// Run delivers until ctx ends: at start (what a previous run left), when
// woken, and when the earliest retry is due.
func (d *Dispatcher) Run(ctx context.Context) error {
	return Run(ctx, d.wake, d.cfg.Now, d.Flush)
}

// Warning says that the channel refused a verdict for good (until one is
// delivered again), or that verdicts wait because it refuses them, since
// when and why; "" while they go out within AlertAfter.
func (d *Dispatcher) Warning() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refusal == "":
		return ""
	case !d.dead.IsZero():
		return fmt.Sprintf("%s: verdicts refused for good (dead-lettered) since %s: %s", d.to.Name(), d.dead.UTC().Format(time.RFC3339), d.refusal)
	case d.oldest.IsZero() || d.cfg.Now().Sub(d.oldest) < d.cfg.AlertAfter:
		return ""
	}
	return fmt.Sprintf("%s: verdicts undelivered since %s: %s", d.to.Name(), d.oldest.UTC().Format(time.RFC3339), d.refusal)
}

// Flush delivers every verdict due, oldest first, records each outcome,
// and returns when the next retry is due (zero when nothing waits). A
// rate limit stops the burst: no request goes to the service before it
// ends.
func (d *Dispatcher) Flush(ctx context.Context) time.Time {
	now := d.cfg.Now()
	if now.Before(d.limitedUntil) {
		return d.limitedUntil
	}
	pubs, err := d.outbox.Publications()
	if err != nil {
		d.warner.Warn("read the outbox of "+d.to.Name(), err)
		return now.Add(backoffBase)
	}
	var next, oldest time.Time
	pacing := map[rollout.Key]paced{}
	defer func() {
		// The next Flush reads what this one recorded.
		d.rec.wait()
		d.mu.Lock()
		d.oldest, d.paced = oldest, pacing
		d.mu.Unlock()
	}()
	wait := func(p Publication, at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
		if oldest.IsZero() || p.Since.Before(oldest) {
			oldest = p.Since
		}
	}
	for i, p := range pubs {
		if ctx.Err() != nil {
			wait(p, now)
			continue
		}
		if p.Waiting(now) {
			wait(p, p.NextAttempt)
			continue
		}
		if at := p.SentAt.Add(d.cfg.Pace); d.cfg.Pace > 0 && p.SentSeq > 0 && p.Sent == p.Verdict && now.Before(at) {
			wait(p, at)
			pacing[p.Key] = paced{sent: p.Sent, until: at}
			continue
		}
		at, limited := d.deliver(ctx, p)
		if !at.IsZero() {
			wait(p, at)
		}
		if limited {
			for _, q := range pubs[i+1:] {
				wait(q, d.limitedUntil)
			}
			break
		}
	}
	return next
}

// deliver sends one verdict and records the outcome; it returns when p
// is to be tried again (zero: delivered, skipped or dead), and whether the
// service's rate limit stopped it.
func (d *Dispatcher) deliver(ctx context.Context, p Publication) (time.Time, bool) {
	log := d.log.With("cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String())
	// Written with the delivery's outcome, in order, before the next Flush
	// reads the outbox: a later delivery updates what this one made. A
	// crash before it is written makes another next time, as a failure
	// to record it does (a forge finds its deployment again by its
	// marker; a chat may post twice).
	save := func(ref string) { d.record(p, func(q *Publication) { q.Ref = ref }) }
	err := d.to.Deliver(ctx, p, save)
	var skip Skip
	switch {
	case errors.As(err, &skip):
		d.record(p, func(q *Publication) { q.SentSeq, q.LastError = max(q.SentSeq, q.taken(p)), skip.Error() })
		d.count("skipped")
		log.Debug("verdict not shown", "why", string(skip))
		return time.Time{}, false
	case err != nil:
		fe := AsError(err)
		if fe.Gone && p.Ref != "" {
			// The record used is gone (deleted in the service): the next
			// delivery finds or makes another.
			d.record(p, func(q *Publication) { q.Ref = "" })
			fe = &Error{Status: fe.Status, Retry: true, Message: "the record of it is gone: " + fe.Message}
		}
		return d.retry(p, fe, log)
	}
	at := d.cfg.Now()
	d.record(p, func(q *Publication) { q.Delivered(p, at) })
	d.mu.Lock()
	d.refusal, d.dead = "", time.Time{}
	d.mu.Unlock()
	d.count("sent")
	return time.Time{}, false
}

// retry records a failed delivery: again after the service's Retry-After
// or with backoff when transient, dead-lettered when not. The wait counts
// from now, when the answer arrived: a Retry-After is the service's word
// from then, and a rate limit's reset was read against it (Classify).
func (d *Dispatcher) retry(p Publication, fe *Error, log *slog.Logger) (time.Time, bool) {
	now := d.cfg.Now()
	d.mu.Lock()
	d.refusal = fe.Error()
	if !fe.Retry && d.dead.IsZero() {
		d.dead = now
	}
	d.mu.Unlock()
	if !fe.Retry {
		d.record(p, func(q *Publication) {
			if q.Seq == p.Seq {
				q.DeadLetter(fe.Error())
			}
		})
		d.count("dead")
		log.Error(d.to.Name()+" refused the verdict for good, dead-lettered", "err", fe.Error())
		return time.Time{}, false
	}
	after := fe.After
	if after <= 0 {
		after = Backoff(p.Attempts+1, backoffBase, backoffMax)
	}
	at := now.Add(after)
	d.record(p, func(q *Publication) { q.Retry(at, fe.Error()) })
	outcome := "retried"
	if fe.Limited {
		outcome = "rate_limited"
		d.limitedUntil = at
	}
	d.count(outcome)
	d.warner.Warn("deliver a verdict to "+d.to.Name()+", will retry", fe)
	return at, fe.Limited
}

// record applies f to p's record, in the order outcomes come: written
// with the outcomes that arrive while the write before is under way, in
// one transaction (recorder). A failure to record is logged: the delivery
// then happens again, which every channel takes (an update in place, an
// idempotency key).
func (d *Dispatcher) record(p Publication, f func(*Publication)) {
	d.rec.add(Update{Key: p.Key, Apply: f})
}

// recorder writes a dispatcher's outcomes as they come, in batches: what
// arrived while the last batch was being written is the next batch (a
// group commit), so that a burst of deliveries costs a handful of store
// transactions, not one each, and an outcome waits for at most one write
// before its own. An outcome not written yet when the process dies is a
// delivery made again at the next start: each verdict at most once more
// per crash, as before, though a crash may now repeat several rollouts'.
type recorder struct {
	box Verdicts
	log *slog.Logger

	mu      sync.Mutex
	pending []Update
	writing bool
	idle    *sync.Cond // signalled when a write ends with nothing pending
}

func newRecorder(box Verdicts, log *slog.Logger) *recorder {
	r := &recorder{box: box, log: log}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// add queues u and starts a writer when none runs.
func (r *recorder) add(u Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, u)
	if !r.writing {
		r.writing = true
		go r.write()
	}
}

// write writes what is pending, batch after batch, until nothing is.
func (r *recorder) write() {
	r.mu.Lock()
	for len(r.pending) > 0 {
		batch := r.pending
		r.pending = nil
		r.mu.Unlock()
		if err := r.box.UpdatePublications(batch); err != nil {
			r.log.Warn("record deliveries", "err", err, "outcomes", len(batch))
		}
		r.mu.Lock()
	}
	r.writing = false
	r.idle.Broadcast()
	r.mu.Unlock()
}

// wait returns once every outcome added is written.
func (r *recorder) wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.writing {
		r.idle.Wait()
	}
}
