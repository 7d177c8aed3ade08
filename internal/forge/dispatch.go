package forge

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Backoff of transient failures without a Retry-After: first retry after
// backoffBase, doubling, never more than backoffMax apart.
const (
	backoffBase = 15 * time.Second
	backoffMax  = 10 * time.Minute
)

// Config is what the dispatcher needs besides the forge.
type Config struct {
	// Repo is the repository of a rollout's source (zero: none known),
	// or why it has none: the rollout is not shown (Repos.Repo).
	Repo func(source rollout.Ref) (Repo, error)
	// LogURL is a rollout's status page, "" when the service does not
	// know its own URL.
	LogURL func(k rollout.Key) string
	// AlertAfter: a verdict undelivered for longer makes Warning say so.
	AlertAfter time.Duration
	// Environments names the forge's environment of a cluster when it is
	// not the cluster's own name.
	Environments map[string]string
}

// Dispatcher delivers the forge outbox. No network I/O happens inside a
// store transaction: it reads the records, calls the forge, then records
// each outcome.
type Dispatcher struct {
	outbox outbox.Verdicts
	forge  Forge
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	wake   outbox.Waker

	// Owned by Flush.
	limitedUntil time.Time // the forge's rate limit: no request before
	warner       outbox.Warner

	mu      sync.Mutex
	refusal string    // the forge's last refusal, until a delivery succeeds
	oldest  time.Time // the oldest verdict left undelivered by the last Flush
	dead    time.Time // a verdict refused for good since the last delivery

	outcomes *prometheus.CounterVec
}

// NewDispatcher wires a dispatcher for one forge: it reads the outbox
// alone. reg may be nil.
func NewDispatcher(box outbox.Verdicts, f Forge, cfg Config, log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *Dispatcher {
	d := &Dispatcher{
		outbox: box, forge: f, cfg: cfg, log: log.With("forge", f.Name()), now: now,
		warner: outbox.Warner{Log: log.With("forge", f.Name())},
		wake:   outbox.NewWaker(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fdn_forge_deliveries_total",
			Help: "Verdicts delivered to a forge, by outcome: sent, retried (transient failure), rate_limited, dead (refused for good), skipped (no repository or commit).",
		}, []string{"forge", "outcome"}),
	}
	for _, o := range []string{"sent", "retried", "rate_limited", "dead", "skipped"} {
		d.outcomes.WithLabelValues(f.Name(), o)
	}
	if reg != nil {
		reg.MustRegister(d.outcomes)
	}
	return d
}

// Wake tells the dispatcher that verdicts were published. It never blocks.
func (d *Dispatcher) Wake() { d.wake.Wake() }

// Run delivers until ctx ends: at start (what a previous run left), when
// woken, and when the earliest retry is due.
func (d *Dispatcher) Run(ctx context.Context) error {
	return outbox.Run(ctx, d.wake, d.now, d.Flush)
}

// Warning says that the forge refused a verdict for good (until one is
// delivered again), or that verdicts wait because it refuses them, since
// when and why; "" while they go out within AlertAfter.
func (d *Dispatcher) Warning() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refusal == "":
		return ""
	case !d.dead.IsZero():
		return fmt.Sprintf("%s: verdicts refused for good (dead-lettered) since %s: %s", d.forge.Name(), d.dead.UTC().Format(time.RFC3339), d.refusal)
	case d.oldest.IsZero() || d.now().Sub(d.oldest) < d.cfg.AlertAfter:
		return ""
	}
	return fmt.Sprintf("%s: verdicts undelivered since %s: %s", d.forge.Name(), d.oldest.UTC().Format(time.RFC3339), d.refusal)
}

// Flush delivers every verdict due, oldest first, records each outcome,
// and returns when the next retry is due (zero when nothing waits). A
// rate limit stops the burst: no request goes to the forge before it ends.
func (d *Dispatcher) Flush(ctx context.Context) time.Time {
	now := d.now()
	if now.Before(d.limitedUntil) {
		return d.limitedUntil
	}
	pubs, err := d.outbox.Publications()
	if err != nil {
		d.warner.Warn("read the forge outbox", err)
		return now.Add(backoffBase)
	}
	var next, oldest time.Time
	defer func() {
		d.mu.Lock()
		d.oldest = oldest
		d.mu.Unlock()
	}()
	wait := func(p outbox.Publication, at time.Time) {
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
// forge's rate limit stopped it.
func (d *Dispatcher) deliver(ctx context.Context, p outbox.Publication) (time.Time, bool) {
	log := d.log.With("cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String())
	u, why := d.update(p)
	if why != "" {
		d.record(p, func(q *outbox.Publication) { q.SentSeq, q.LastError = max(q.SentSeq, p.Seq), "not shown: "+why }, log)
		d.outcomes.WithLabelValues(d.forge.Name(), "skipped").Inc()
		log.Debug("verdict not shown in the forge", "why", why)
		return time.Time{}, false
	}
	ref := p.Ref
	if ref == "" {
		var err error
		if ref, err = d.forge.Ensure(ctx, u); err != nil {
			return d.retry(p, AsError(err), log)
		}
		// Recorded before the status: after a crash in between, the next
		// delivery posts to this one (and Ensure finds it again anyway).
		if err := d.outbox.UpdatePublication(p.Key, func(q *outbox.Publication) { q.Ref = ref }); err != nil {
			d.warner.Warn("record the forge's deployment", err)
		}
	}
	if err := d.forge.Status(ctx, ref, u); err != nil {
		fe := AsError(err)
		if fe.Status == 404 && p.Ref != "" {
			// The deployment recorded is gone (deleted in the forge): the
			// next delivery finds or makes another.
			d.record(p, func(q *outbox.Publication) { q.Ref = "" }, log)
			fe = &Error{Status: fe.Status, Retry: true, Message: "the deployment recorded is gone: " + fe.Message}
		}
		return d.retry(p, fe, log)
	}
	if err := d.inside(ctx, u, log); err != nil {
		return d.retry(p, AsError(err), log)
	}
	d.record(p, func(q *outbox.Publication) {
		q.SentSeq, q.Sent = max(q.SentSeq, p.Seq), p.Verdict
		if q.Seq == p.Seq {
			q.Delivery = outbox.Delivery{}
		}
	}, log)
	d.mu.Lock()
	d.refusal, d.dead = "", time.Time{}
	d.mu.Unlock()
	d.outcomes.WithLabelValues(d.forge.Name(), "sent").Inc()
	log.Info("verdict shown in the forge", "repo", u.Repo.String(), "commit", u.Commit, "state", string(u.State), "ref", ref)
	return time.Time{}, false
}

// inside gives the commits that went out inside u's, when it applied or
// failed, the status u's commit has: those merged after the source's
// previously applied commit on the cluster, up to u's (MaxInside of
// them). The source's first applied commit has none: nothing says where
// its history starts. Repeated after a crash, the statuses are the same.
// Only a transient failure is returned (the delivery is tried again): one
// the forge refuses for good (the base commit gone after a force-push, a
// commit it does not know) is logged, and never holds up u's own verdict.
func (d *Dispatcher) inside(ctx context.Context, u Update, log *slog.Logger) error {
	c, ok := d.forge.(Comparer)
	if !ok || !c.Compares() || u.State != StateSuccess && u.State != StateFailure {
		return nil
	}
	line := u.Source.String()
	if line == "" {
		line = u.Repo.String()
	}
	base, err := d.outbox.Head(u.Cluster, line)
	if err != nil {
		return &Error{Retry: true, Message: "read the last commit applied: " + err.Error()}
	}
	if base != "" && base != u.Commit {
		commits, err := c.Between(ctx, u.Repo, base, u.Commit, MaxInside)
		if err != nil && AsError(err).Retry {
			return err
		} else if err != nil {
			log.Warn("the commits that went out inside it are not shown", "base", base, "err", err)
		}
		desc := Clean("went out in "+flux.Short(u.Commit)+", "+u.Description, MaxDescription)
		for _, x := range commits {
			if x == u.Commit || x == base {
				continue
			}
			if err := c.StatusOf(ctx, u, x, desc); err != nil && AsError(err).Retry {
				return err
			} else if err != nil {
				log.Warn("a commit that went out inside it is not shown", "commit", x, "err", err)
			}
		}
		if len(commits) > 0 {
			log.Info("commits that went out inside it shown", "commits", len(commits)-1)
		}
	}
	if u.State != StateSuccess {
		return nil
	}
	if err := d.outbox.SetHead(u.Cluster, line, u.Commit); err != nil {
		return &Error{Retry: true, Message: "record the last commit applied: " + err.Error()}
	}
	return nil
}

// update is what the forge is told of p: its verdict, with what was
// shown of its rollout when it was decided. why says why it is not shown.
func (d *Dispatcher) update(p outbox.Publication) (u Update, why string) {
	state, ok := StateOf(p.Verdict)
	if !ok {
		return u, "no forge state for verdict " + p.Verdict.String()
	}
	if p.Shown == (rollout.Shown{}) {
		// An older binary's record, of a rollout gone before this one
		// started (fillShown).
		return u, "the rollout is no longer known (collected)"
	}
	repo, err := d.cfg.Repo(p.Source)
	if err != nil {
		return u, err.Error()
	}
	commit := p.Commit
	if commit == "" {
		return u, "the rollout's revision names no git commit"
	}
	env := p.Key.Cluster
	if e, ok := d.cfg.Environments[env]; ok {
		env = e
	}
	u = Update{Repo: repo, Environment: env, Commit: commit, State: state, Verdict: p.Verdict,
		Description: Describe(p.Verdict, p.Summary),
		Cluster:     p.Key.Cluster, Revision: p.Revision, Source: p.Source}
	if d.cfg.LogURL != nil {
		u.LogURL = d.cfg.LogURL(p.Key)
	}
	return u, ""
}

// retry records a failed delivery: again after the forge's Retry-After or
// with backoff when transient, dead-lettered when not. The wait counts
// from now, when the answer arrived: a Retry-After is the forge's word
// from then, and a rate limit's reset was read against it (Classify).
func (d *Dispatcher) retry(p outbox.Publication, fe *Error, log *slog.Logger) (time.Time, bool) {
	now := d.now()
	d.mu.Lock()
	d.refusal = fe.Error()
	if !fe.Retry && d.dead.IsZero() {
		d.dead = now
	}
	d.mu.Unlock()
	if !fe.Retry {
		d.record(p, func(q *outbox.Publication) {
			if q.Seq == p.Seq {
				q.DeadLetter(fe.Error())
			}
		}, log)
		d.outcomes.WithLabelValues(d.forge.Name(), "dead").Inc()
		log.Error("the forge refused the verdict for good, dead-lettered", "err", fe.Error())
		return time.Time{}, false
	}
	after := fe.After
	if after <= 0 {
		after = outbox.Backoff(p.Attempts+1, backoffBase, backoffMax)
	}
	at := now.Add(after)
	d.record(p, func(q *outbox.Publication) {
		q.Retry(at, fe.Error())
	}, log)
	outcome := "retried"
	if fe.Limited {
		outcome = "rate_limited"
		d.limitedUntil = at
	}
	d.outcomes.WithLabelValues(d.forge.Name(), outcome).Inc()
	d.warner.Warn("deliver a verdict to the forge, will retry", fe)
	return at, fe.Limited
}

// record applies f to p's record; a failure to record is logged: the
// delivery then happens again, which the forge takes (idempotent).
func (d *Dispatcher) record(p outbox.Publication, f func(*outbox.Publication), log *slog.Logger) {
	if err := d.outbox.UpdatePublication(p.Key, f); err != nil {
		log.Warn("record a forge delivery", "err", err)
	}
}
