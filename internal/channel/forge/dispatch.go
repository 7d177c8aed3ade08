package forge

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Config is what the forge's deliverer needs besides the forge.
type Config struct {
	// Repo is the repository of a rollout's source on its cluster (zero:
	// none known), or why it has none: the rollout is not shown
	// (Repos.Repo).
	Repo func(cluster string, source rollout.Ref) (Repo, error)
	// LogURL is a rollout's status page, "" when the service does not
	// know its own URL.
	LogURL func(k rollout.Key) string
	// AlertAfter: a verdict undelivered for longer makes the dispatcher's
	// Warning say so.
	AlertAfter time.Duration
	// Environments names the forge's environment of a cluster when it is
	// not the cluster's own name.
	Environments map[string]string
}

// NewDispatcher wires the dispatcher of the forge's outbox (box, and the
// commits last applied: heads) to f, its outcomes counted in
// fdn_forge_deliveries_total too (Deliveries). reg may be nil.
func NewDispatcher(box outbox.Verdicts, heads outbox.Heads, f Forge, cfg Config, log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *outbox.Dispatcher {
	to := NewDeliverer(heads, f, cfg, log)
	return outbox.NewDispatcher(box, to, outbox.DispatchConfig{
		AlertAfter: cfg.AlertAfter, Log: log, Now: now, Reg: reg, Counted: Counted(reg, to.Name())})
}

// Counted counts the outcomes of the forge named name in
// fdn_forge_deliveries_total, registered on reg (nil: none): the forge's
// outcomes as they were counted before there were other channels, beside
// fdn_deliveries_total. It is a DispatchConfig.Counted.
func Counted(reg prometheus.Registerer, name string) func(outcome string) {
	byForge := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fdn_forge_deliveries_total",
		Help: "Verdicts delivered to a forge, by outcome: sent, retried (transient failure), rate_limited, dead (refused for good), skipped (no repository or commit); fdn_deliveries_total{channel=<the forge>} counts the same.",
	}, []string{"forge", "outcome"})
	if reg != nil {
		reg.MustRegister(byForge)
	}
	for _, o := range outbox.OutcomeNames() {
		byForge.WithLabelValues(name, o)
	}
	return func(o string) { byForge.WithLabelValues(name, o).Inc() }
}

// NewDeliverer is the forge's Deliverer: a deployment (or a commit
// status) of each rollout's commit in f, and the commits that went out
// inside it (heads: the commits last shown applied).
func NewDeliverer(heads outbox.Heads, f Forge, cfg Config, log *slog.Logger) outbox.Deliverer {
	return &deliverer{forge: f, heads: heads, cfg: cfg, log: log.With("forge", f.Name())}
}

// deliverer shows verdicts in a forge: a deployment (or a commit status)
// of the rollout's commit, and the commits that went out inside it.
type deliverer struct {
	forge Forge
	heads outbox.Heads
	cfg   Config
	log   *slog.Logger
}

func (d *deliverer) Name() string { return d.forge.Name() }

// Deliver finds or makes the forge's record of p's rollout, then posts
// its state there.
func (d *deliverer) Deliver(ctx context.Context, p outbox.Publication, save func(string)) error {
	u, why := d.update(p)
	if why != "" {
		return outbox.Skip(why)
	}
	log := d.log.With("cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String())
	ref := p.Ref
	if ref == "" {
		var err error
		if ref, err = d.forge.Ensure(ctx, u); err != nil {
			return err
		}
		// Recorded with the outcome, whether the status goes or not: the
		// next delivery posts to this one (after a crash before the record,
		// Ensure finds it again by its marker).
		save(ref)
	}
	if err := d.forge.Status(ctx, ref, u); err != nil {
		if fe := outbox.AsError(err); fe.Status == 404 && p.Ref != "" {
			// The deployment recorded is gone (deleted in the forge).
			return &outbox.Error{Status: fe.Status, Retry: true, Gone: true, Message: fe.Message}
		}
		return err
	}
	if err := d.inside(ctx, u, log); err != nil {
		return err
	}
	log.Info("verdict shown in the forge", "repo", u.Repo.String(), "commit", u.Commit, "state", string(u.State), "ref", ref)
	return nil
}

// inside gives the commits that went out inside u's, when it applied or
// failed, the status u's commit has: those merged after the source's
// previously applied commit on the cluster, up to u's (MaxInside of
// them). The source's first applied commit has none: nothing says where
// its history starts. Repeated after a crash, the statuses are the same.
// Only a transient failure is returned (the delivery is tried again): one
// the forge refuses for good (the base commit gone after a force-push, a
// commit it does not know) is logged, and never holds up u's own verdict.
func (d *deliverer) inside(ctx context.Context, u Update, log *slog.Logger) error {
	c, ok := d.forge.(Comparer)
	if !ok || !c.Compares() || u.State != StateSuccess && u.State != StateFailure {
		return nil
	}
	line := u.Source.String()
	if line == "" {
		line = u.Repo.String()
	}
	base, err := d.heads.Head(u.Cluster, line)
	if err != nil {
		return &outbox.Error{Retry: true, Message: "read the last commit applied: " + err.Error()}
	}
	if base != "" && base != u.Commit {
		commits, err := c.Between(ctx, u.Repo, base, u.Commit, MaxInside)
		if err != nil && outbox.AsError(err).Retry {
			return err
		} else if err != nil {
			log.Warn("the commits that went out inside it are not shown", "base", base, "err", err)
		}
		desc := Clean("went out in "+flux.Short(u.Commit)+", "+u.Description, MaxDescription)
		for _, x := range commits {
			if x == u.Commit || x == base {
				continue
			}
			if err := c.StatusOf(ctx, u, x, desc); err != nil && outbox.AsError(err).Retry {
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
	if err := d.heads.SetHead(u.Cluster, line, u.Commit); err != nil {
		return &outbox.Error{Retry: true, Message: "record the last commit applied: " + err.Error()}
	}
	return nil
}

// update is what the forge is told of p: its verdict, with what was
// shown of its rollout when it was decided. why says why it is not shown.
func (d *deliverer) update(p outbox.Publication) (u Update, why string) {
	state, ok := StateOf(p.Verdict)
	if !ok {
		return u, "no forge state for verdict " + p.Verdict.String()
	}
	if p.Shown == (rollout.Shown{}) {
		// An older binary's record, of a rollout gone before this one
		// started (fillShown).
		return u, "the rollout is no longer known (collected)"
	}
	repo, err := d.cfg.Repo(p.Key.Cluster, p.Source)
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
