package mail

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
)

// Mails wait at most this long between retries of a transient failure
// (the outbox's rule, with its first retry after 15 s, doubling): an SMTP
// server down for hours is tried twice an hour, not every ten minutes.
const backoffMax = 30 * time.Minute

// Dispatcher sends what the mail outbox holds: the outbox's one
// dispatcher (its due, retry and dead-letter rules) over a deliverer that
// renders each mail and hands a burst to the Sender. Mail keeps what is
// its own: each mail recorded sent before the next goes (a crash repeats
// at most the one under way, with the same Message-ID), and its stuck
// report and counters.
type Dispatcher struct {
	*outbox.MailDispatcher
	alertAfter time.Duration
}

// NewDispatcher wires the dispatcher; a mail undelivered for longer than
// alertAfter is reported stuck. reg may be nil.
func NewDispatcher(box outbox.Mails, sender Sender, renderer *Renderer, log *slog.Logger, now func() time.Time, alertAfter time.Duration, reg prometheus.Registerer) *Dispatcher {
	sent := prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_sent_total", Help: "Mails delivered."})
	retried := prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_retried_total", Help: "Transient mail failures, each retried later."})
	dead := prometheus.NewCounter(prometheus.CounterOpts{Name: "fdn_mails_dead_lettered_total", Help: "Mails that failed for good."})
	counters := map[string]prometheus.Counter{"sent": sent, "retried": retried, "dead": dead}
	name := "mail" // in logs: where the mails go
	switch sender.(type) {
	case *SMTP:
		name = "smtp"
	case *Dir:
		name = "mail-dir"
	}
	d := &Dispatcher{alertAfter: alertAfter}
	d.MailDispatcher = outbox.NewMailDispatcher(box, &deliverer{name: name, sender: sender, renderer: renderer, log: log}, outbox.DispatchConfig{
		AlertAfter: alertAfter, MaxBackoff: backoffMax, OneByOne: true, What: "mail", Log: log, Now: now,
		Counted: func(outcome string) {
			if c := counters[outcome]; c != nil {
				c.Inc()
			}
		},
	})
	if reg != nil {
		reg.MustRegister(sent, retried, dead, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fdn_mails_stuck",
			Help: "Mails undelivered for longer than --mail-alert-after (the SMTP server refuses or is unreachable).",
		}, func() float64 { n, _, _ := d.Stuck(alertAfter); return float64(n) }))
	}
	return d
}

// Warning says how many mails are stuck, since when and why; "" when
// every mail went out within alertAfter.
func (d *Dispatcher) Warning() string {
	n, oldest, why := d.Stuck(d.alertAfter)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d mails undelivered for longer than %s, the oldest since %s: %s",
		n, d.alertAfter, oldest.UTC().Format(time.RFC3339), why)
}

// deliverer renders mails and sends them, a burst at a time.
type deliverer struct {
	name     string
	sender   Sender
	renderer *Renderer
	log      *slog.Logger
}

func (m *deliverer) Name() string { return m.name }

// Deliver sends one mail (the dispatcher gives a Burster its bursts).
func (m *deliverer) Deliver(ctx context.Context, q outbox.Queued, _ func(string)) error {
	err := error(&outbox.Error{Retry: true, Message: "not tried: stopping"})
	m.DeliverEach(ctx, []outbox.Queued{q}, func(_ int, e error) { err = e })
	return err
}

// DeliverEach renders qs and sends them in one burst (one connection, one
// directory sync), telling each outcome as the sender gives it. A mail
// whose template fails is refused for good: it would fail every time.
func (m *deliverer) DeliverEach(ctx context.Context, qs []outbox.Queued, done func(int, error)) {
	msgs := make([]Rendered, 0, len(qs))
	of := make([]int, 0, len(qs)) // the index in qs of each message
	for i, q := range qs {
		r, err := m.renderer.Render(q)
		if err != nil {
			done(i, &outbox.Error{Message: err.Error()})
			continue
		}
		msgs = append(msgs, r)
		of = append(of, i)
	}
	if len(msgs) == 0 {
		return
	}
	m.sender.SendEach(ctx, msgs, func(j int, res Result) {
		switch i := of[j]; {
		case res.Untried:
		case res.Err == nil:
			m.log.Info("mail sent", "mail", string(qs[i].Mail.Kind), "to", qs[i].Mail.To, "message_id", msgs[j].MessageID, "subject", msgs[j].Subject)
			done(i, nil)
		default:
			done(i, &outbox.Error{Retry: res.Retry, Message: res.Err.Error()})
		}
	})
}
