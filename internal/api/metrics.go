package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Store is what the metrics read of the store: the mail outbox, the
// settled rollouts and the file's size.
type Store interface {
	Pending() ([]outbox.Queued, error)
	SettledCount() (int, error)
	Size() int64
}

// RegisterMetrics adds the service's gauges, read at scrape time from the
// engine's snapshot and the outbox, and returns the function that counts
// each change of a rollout's verdict.
func RegisterMetrics(reg prometheus.Registerer, rs Rollouts, store Store, now func() time.Time) func(ch rollout.VerdictChange) {
	reg.MustRegister(&rolloutsCollector{rs: rs, desc: prometheus.NewDesc("fdn_rollouts",
		"Live rollouts (in memory: they can still change), by verdict.", []string{"verdict"}, nil)})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_rollouts_settled",
		Help: "Settled rollouts: final, kept on disk until the retention ends.",
	}, func() float64 {
		n, _ := store.SettledCount()
		return float64(n)
	}))
	// Read at each scrape: on PostgreSQL, the engine is the term's.
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "fdn_rollouts_settled_total",
		Help: "Rollouts settled: their final view moved to the archive, their evidence dropped from memory and disk.",
	}, func() float64 { return float64(rs.Stats().Settled.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "fdn_observations_ignored_total",
		Help: "Observations acknowledged and ignored because they concern settled history: a settled rollout, or a revision new to a layer whose predecessor there is settled.",
	}, func() float64 { return float64(rs.Stats().Ignored.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "fdn_store_commit_failures_total",
		Help: "Commits of events to the store that failed (the events were answered 503, not acknowledged).",
	}, func() float64 { n, _ := rs.CommitFailures(); return float64(n) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_store_last_commit_failure_timestamp_seconds",
		Help: "When a commit to the store last failed, as Unix time; 0 before any.",
	}, func() float64 {
		if _, at := rs.CommitFailures(); !at.IsZero() {
			return float64(at.UnixNano()) / 1e9
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fdn_store_bytes",
		Help: "Size of the state: the bbolt file, or the PostgreSQL database.",
	}, func() float64 { return float64(store.Size()) }))
	reg.MustRegister(&outboxCollector{outbox: store, now: now,
		depth:  prometheus.NewDesc("fdn_outbox_depth", "Mails waiting in the outbox.", nil, nil),
		oldest: prometheus.NewDesc("fdn_outbox_oldest_pending_seconds", "Age of the oldest mail waiting in the outbox.", nil, nil),
	})
	toTerminal := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fdn_rollout_terminal_seconds",
		Help:    "Time from a rollout's first evidence to its terminal verdict, by verdict.",
		Buckets: []float64{30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
	}, []string{"verdict"})
	verdicts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fdn_rollout_verdicts_total",
		Help: "Terminal verdicts rollouts reached, by verdict: a change from one terminal verdict to another counts too (superseded then failed, stuck then applied, a failure after applied).",
	}, []string{"verdict"})
	reg.MustRegister(toTerminal, verdicts)
	// Every verdict's series exists from the start at 0: a series born at
	// its first failure has no increase to alert on (Prometheus's
	// increase and rate need a sample before it), so the first failed
	// rollout after each start would page no one.
	for _, v := range rollout.Verdicts() {
		if v.Terminal() {
			toTerminal.WithLabelValues(v.String())
			verdicts.WithLabelValues(v.String())
		}
	}
	return func(ch rollout.VerdictChange) {
		v := ch.View
		if !v.Terminal {
			return
		}
		verdicts.WithLabelValues(v.Verdict.String()).Inc()
		if ch.New || !ch.From.Terminal() {
			toTerminal.WithLabelValues(v.Verdict.String()).Observe(max(now().Sub(v.FirstSeen).Seconds(), 0))
		}
	}
}

type rolloutsCollector struct {
	rs   Rollouts
	desc *prometheus.Desc
}

func (c *rolloutsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rolloutsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.rs.Live()
	for _, v := range rollout.Verdicts() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[v]), v.String())
	}
}

type outboxCollector struct {
	outbox        Store
	now           func() time.Time
	depth, oldest *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.depth; ch <- c.oldest }

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	pending, err := c.outbox.Pending()
	if err != nil {
		return
	}
	age := 0.0
	for _, q := range pending {
		age = max(age, c.now().Sub(q.Enqueued).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(len(pending)))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
