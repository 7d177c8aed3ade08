package api_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestVerdictMetrics: the time to a terminal verdict is observed once a
// rollout, when it first turns terminal; the verdicts counter counts every
// terminal verdict reached, refinements included, so that a failure after
// applied or superseded is an increase an alert sees.
func TestVerdictMetrics(t *testing.T) {
	te := enginetest.Start(t, t.TempDir(), rollout.Config{StuckAfter: time.Hour}, time.Now, false)
	reg := prometheus.NewRegistry()
	observe := api.RegisterMetrics(reg, te.Engine, te.DB, time.Now)
	view := func(v rollout.Verdict) *rollout.View {
		return &rollout.View{Verdict: v, Terminal: v.Terminal(), FirstSeen: time.Now().Add(-time.Minute)}
	}
	for _, ch := range []rollout.VerdictChange{
		{View: view(rollout.VerdictApplying), New: true},
		{View: view(rollout.VerdictApplied), New: true},                        // first seen applied
		{View: view(rollout.VerdictFailed), From: rollout.VerdictApplying},     // fails
		{View: view(rollout.VerdictSuperseded), From: rollout.VerdictApplying}, // superseded,
		{View: view(rollout.VerdictFailed), From: rollout.VerdictSuperseded},   // then refined to failed
		{View: view(rollout.VerdictFailed), From: rollout.VerdictApplied},      // a failure after applied
		{View: view(rollout.VerdictStuck), From: rollout.VerdictApplying},      // stuck,
		{View: view(rollout.VerdictApplied), From: rollout.VerdictStuck},       // then applied
	} {
		observe(ch)
	}
	if n, err := testutil.GatherAndCount(reg, "fdn_rollout_verdicts_total"); err != nil || n != 4 {
		t.Fatalf("fdn_rollout_verdicts_total: %d series, %v; want one per terminal verdict", n, err)
	}
	for _, tt := range []struct {
		verdict           string
		reached, observed int
	}{
		{"applied", 2, 1},
		{"failed", 3, 1},
		{"superseded", 1, 1},
		{"stuck", 1, 1},
	} {
		if got := metricValue(t, reg, "fdn_rollout_verdicts_total", tt.verdict); got != float64(tt.reached) {
			t.Errorf("fdn_rollout_verdicts_total{verdict=%q} = %v, want %d", tt.verdict, got, tt.reached)
		}
		if got := metricValue(t, reg, "fdn_rollout_terminal_seconds", tt.verdict); got != float64(tt.observed) {
			t.Errorf("fdn_rollout_terminal_seconds_count{verdict=%q} = %v, want %d", tt.verdict, got, tt.observed)
		}
	}
}

// metricValue is a counter's value, or a histogram's count, for a verdict.
func metricValue(t *testing.T, reg *prometheus.Registry, name, verdict string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "verdict" && l.GetValue() == verdict {
					if h := m.GetHistogram(); h != nil {
						return float64(h.GetSampleCount())
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{verdict=%q} not gathered", name, verdict)
	return 0
}
