package mail

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
)

// Backoff of transient failures: first retry after backoffBase, doubling,
// never more than backoffMax apart.
const (
	backoffBase = 15 * time.Second
	backoffMax  = 30 * time.Minute
)

// Dispatcher sends what the outbox holds. No network I/O happens inside a
// store transaction: it reads a copy, sends, then records the outcome.
type Dispatcher struct {
	outbox   outbox.Mails
	sender   Sender
	renderer *Renderer
	log      *slog.Logger
	now      func() time.Time
	wake     outbox.Waker
	warner   outbox.Warner

	// What the last Flush left waiting, for Warning and the metric: a
	// mail undelivered for longer than alertAfter is stuck.
	alertAfter time.Duration
	mu         sync.Mutex
	waiting    []time.Time // when each mail left waiting was enqueued
	retryErr   string      // the last transient failure

	sent, retried, dead prometheus.Counter
}

// NewDispatcher wires the dispatcher; a mail undelivered for longer than
// alertAfter is reported stuck. reg may be nil.
func NewDispatcher(box outbox.Mails, sender Sender, renderer *Renderer, log *slog.Logger, now func() time.Time, alertAfter time.Duration, reg prometheus.Registerer) *Dispatcher {
	d := &Dispatcher{
		outbox: box, sender: sender, renderer: renderer, log: log, now: now, alertAfter: alertAfter, warner: outbox.Warner{Log: log},
		wake:    outbox.NewWaker(),
		sent:    prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_sent_total", Help: "Mails delivered."}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_retried_total", Help: "Transient mail failures, each retried later."}),
		dead:    prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_dead_lettered_total", Help: "Mails that failed for good."}),
	}
	if reg != nil {
		reg.MustRegister(d.sent, d.retried, d.dead, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fdn_mails_stuck",
			Help: "Mails undelivered for longer than --mail-alert-after (the SMTP server refuses or is unreachable).",
		}, func() float64 { n, _ := d.stuck(); return float64(n) }))
	}
	return d
}

// stuck counts the mails left waiting for longer than alertAfter, and
// gives the oldest one's enqueue time.
func (d *Dispatcher) stuck() (int, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cutoff := d.now().Add(-d.alertAfter)
	n, oldest := 0, time.Time{}
	for _, at := range d.waiting {
		if at.Before(cutoff) {
			n++
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
	}
	return n, oldest
}

// Warning says how many mails are stuck, since when and why; "" when
// every mail went out within alertAfter.
func (d *Dispatcher) Warning() string {
	n, oldest := d.stuck()
	if n == 0 {
		return ""
	}
	d.mu.Lock()
	why := d.retryErr
	d.mu.Unlock()
	return fmt.Sprintf("%d mails undelivered for longer than %s, the oldest since %s: %s",
		n, d.alertAfter, oldest.UTC().Format(time.RFC3339), why)
}

// Wake tells the dispatcher that mails were enqueued. It never blocks.
func (d *Dispatcher) Wake() { d.wake.Wake() }

// Run sends due mails until ctx ends: at start (what a previous run left),
// when woken, and when the earliest retry is due. When ctx ends during a
// burst, the mail under way is sent and recorded, the rest of the burst
// waits for the next start.
func (d *Dispatcher) Run(ctx context.Context) error {
	return outbox.Run(ctx, d.wake, d.now, d.Flush)
}

// Flush sends every mail that is due, in one burst over one connection,
// records each outcome, and returns when the next retry is due (zero when
// nothing waits).
func (d *Dispatcher) Flush(ctx context.Context) time.Time {
	pending, err := d.outbox.Pending()
	if err != nil {
		d.warner.Warn("read outbox", err)
		return d.now().Add(backoffBase)
	}
	now := d.now()
	var (
		due     []outbox.Queued
		msgs    []Rendered
		next    time.Time
		waiting []time.Time
	)
	defer func() {
		d.mu.Lock()
		d.waiting = waiting
		d.mu.Unlock()
	}()
	for _, q := range pending {
		if q.Waiting(now) {
			if next.IsZero() || q.NextAttempt.Before(next) {
				next = q.NextAttempt
			}
			waiting = append(waiting, q.Enqueued)
			continue
		}
		r, err := d.renderer.Render(q)
		if err != nil {
			d.deadLetter(q, err) // a template that fails now fails every time
			continue
		}
		due = append(due, q)
		msgs = append(msgs, r)
	}
	if len(msgs) == 0 {
		return next
	}
	// A mail sent but not recorded goes again, with the same Message-ID;
	// when recording fails the burst stops, so that the store's failure
	// repeats one mail, not every mail after it.
	burst, stop := context.WithCancel(ctx)
	defer stop()
	d.sender.SendEach(burst, msgs, func(i int, res Result) {
		q := due[i]
		log := d.log.With(mailAttrs(q)...).With("message_id", msgs[i].MessageID)
		switch {
		case res.Untried:
			waiting = append(waiting, q.Enqueued)
		case res.Err == nil:
			if err := d.outbox.Sent(q.Seq, now); err != nil {
				d.warner.Warn("record sent mail", err)
				stop()
			}
			d.sent.Inc()
			log.Info("mail sent", "subject", msgs[i].Subject)
		case res.Retry:
			q.Retry(now.Add(outbox.Backoff(q.Attempts+1, backoffBase, backoffMax)), res.Err.Error())
			if err := d.outbox.Record(q); err != nil {
				d.warner.Warn("reschedule mail", err)
				stop()
			}
			d.retried.Inc()
			d.warner.Warn("send mail, will retry", res.Err)
			waiting = append(waiting, q.Enqueued)
			d.mu.Lock()
			d.retryErr = res.Err.Error()
			d.mu.Unlock()
			if next.IsZero() || q.NextAttempt.Before(next) {
				next = q.NextAttempt
			}
		default:
			d.deadLetter(q, res.Err)
		}
	})
	return next
}

func (d *Dispatcher) deadLetter(q outbox.Queued, err error) {
	q.DeadLetter(err.Error())
	if serr := d.outbox.Record(q); serr != nil {
		d.warner.Warn("dead-letter mail", serr)
		return
	}
	d.dead.Inc()
	d.log.Error("mail failed for good, dead-lettered", append([]any{"err", err}, mailAttrs(q)...)...)
}

// mailAttrs names a mail in logs: kind, recipient and, for a rollout's
// mail, its cluster and revision.
func mailAttrs(q outbox.Queued) []any {
	attrs := []any{"mail", string(q.Mail.Kind), "to", q.Mail.To}
	if v := q.Mail.View; v != nil {
		attrs = append(attrs, "cluster", v.Cluster, "revision", v.Revision)
	}
	return attrs
}
